package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

func TestPullTagImagesRmi(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	id := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img))

	r := docker(t, "pull", img)
	if r.Code != 0 || !strings.Contains(r.Stdout, "\nDigest: "+suite.Digests[testimages.Busybox]+"\n") ||
		!strings.HasSuffix(r.Stdout, "\nStatus: Image is up to date for "+img+"\n"+img+"\n") {
		t.Errorf("second pull = %+v, want the pushed digest and \"Image is up to date\"", r)
	}

	tagged := ref("husk/tagged")[:len(ref("husk/tagged"))-len("latest")] + "v1"
	if r := docker(t, "tag", img, tagged); r != (result{}) {
		t.Errorf("tag = %+v, want silent success", r)
	}
	images := mustDocker(t, "images", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
	for _, want := range []string{img + " " + id, tagged + " " + id} {
		if !strings.Contains("\n"+images, "\n"+want+"\n") {
			t.Errorf("images lacks %q:\n%s", want, images)
		}
	}
	if got := mustDocker(t, "images", "-q", strings.TrimSuffix(tagged, ":v1")); got != id[len("sha256:"):len("sha256:")+12]+"\n" {
		t.Errorf("images -q REPO = %q, want the short ID", got)
	}
	if r := docker(t, "rmi", tagged); r != (result{Stdout: "Untagged: " + tagged + "\n"}) {
		t.Errorf("rmi of an extra tag = %+v, want only Untagged", r)
	}
	if got := mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img); strings.TrimSpace(got) != id {
		t.Errorf("the image went away with its extra tag: %q", got)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.SaveLoad)
	id := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img))

	archive := mustDocker(t, "save", img)
	r := docker(t, "rmi", img)
	if r.Code != 0 || !strings.HasPrefix(r.Stdout, "Untagged: "+img+"\n") || !strings.Contains(r.Stdout, "Deleted: "+id+"\n") {
		t.Fatalf("rmi = %+v, want Untagged and Deleted lines", r)
	}
	if r := docker(t, "image", "inspect", img); r.Code != 1 {
		t.Fatalf("image inspect after rmi = %+v, want exit 1", r)
	}

	if r := dockerStdin(t, strings.NewReader(archive), "load"); r != (result{Stdout: "Loaded image: " + img + "\n"}) {
		t.Fatalf("load = %+v, want \"Loaded image: %s\"", r, img)
	}
	if got := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img)); got != id {
		t.Errorf("loaded image ID = %s, saved %s", got, id)
	}
	if r := docker(t, "run", "--rm", img, "cat", "/saveload-marker"); r != (result{Stdout: "saveload\n"}) {
		t.Errorf("run of the loaded image = %+v", r)
	}
}

func TestMultiArchPullSelectsAmd64(t *testing.T) {
	requireSuite(t)
	img := ref(testimages.MultiArch)
	digest := suite.Digests[testimages.MultiArch]
	r := docker(t, "pull", img)
	if r.Code != 0 || !strings.Contains(r.Stdout, "\nDigest: "+digest+"\n") ||
		!strings.HasSuffix(r.Stdout, "\nStatus: Downloaded newer image for "+img+"\n"+img+"\n") {
		t.Errorf("pull = %+v, want the index digest and \"Downloaded newer image\"", r)
	}
	repoDigest := strings.TrimSuffix(img, ":latest") + "@" + digest
	if got := mustDocker(t, "image", "inspect", "-f", "{{.Os}}/{{.Architecture}} {{index .RepoDigests 0}}", img); got != "linux/amd64 "+repoDigest+"\n" {
		t.Errorf("image inspect = %q, want linux/amd64 %s", got, repoDigest)
	}
	if r := docker(t, "run", "--rm", img, "cat", "/etc/arch-marker"); r != (result{Stdout: "amd64\n"}) {
		t.Errorf("run = %+v, want the amd64 image's marker", r)
	}
}

// TestRemovedImageLeavesNoBaseDisk: husk turns each image into a read-only
// ext4 base disk on first use; removing the image must remove that disk.
func TestRemovedImageLeavesNoBaseDisk(t *testing.T) {
	s := requireSuite(t)
	if s.Kind != "huskd" {
		t.Skip("base disks are husk's")
	}
	img := pulled(t, testimages.MultiArch)
	id := strings.TrimSpace(mustDocker(t, "image", "inspect", "--format", "{{.Id}}", img))
	mustDocker(t, "run", "--rm", img, "true")
	base := filepath.Join(filepath.Dir(s.DaemonLog), "root", "rootfs", "bases", strings.Replace(id, ":", "-", 1)+".ext4")
	if _, err := os.Stat(base); err != nil {
		t.Fatalf("base disk of %s after a run: %v", id, err)
	}
	mustDocker(t, "rmi", img)
	if _, err := os.Stat(base); !os.IsNotExist(err) {
		t.Errorf("base disk %s still there after rmi (stat: %v)", base, err)
	}
}

// TestRemoveImageInUse: a forced docker rmi by ID keeps an image a
// running container uses, or one an image was built on, as dockerd keeps
// it ("cannot be forced"); husk used to delete both. Its own committed
// image, so a failure takes nothing other tests need.
func TestRemoveImageInUse(t *testing.T) {
	requireSuite(t)
	base := pulled(t, testimages.Busybox)
	src, user := containerName(t, "-src"), containerName(t, "-user")
	mustDocker(t, "run", "--name", src, base, "sh", "-c", "echo x > /marker")
	tag := namePrefix(t) + ":v1"
	id := strings.TrimSpace(mustDocker(t, "commit", src, tag))
	short := strings.TrimPrefix(id, "sha256:")[:12]
	t.Cleanup(func() { docker(t, "rmi", "-f", tag) })

	mustDocker(t, "run", "-d", "--name", user, tag, "sleep", "600")
	r := docker(t, "rmi", "-f", short)
	if want := "conflict: unable to delete " + short + " (cannot be forced) - image is being used by running container "; r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Errorf("rmi -f of a running container's image: %+v, want %q", r, want)
	}
	mustDocker(t, "rm", "-f", user)

	child := namePrefix(t) + "-child:v1"
	t.Cleanup(func() { docker(t, "rmi", "-f", child) })
	if b := dockerBuild(t, writeContext(t, map[string]string{"Dockerfile": "FROM " + tag + "\nRUN echo y > /child\n"}), "-t", child); b.Code != 0 {
		t.Fatalf("build on the image: %+v", b)
	}
	r = docker(t, "rmi", "-f", short)
	if want := "conflict: unable to delete " + short + " (cannot be forced) - image has dependent child images"; r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Errorf("rmi -f of an image another was built on: %+v, want %q", r, want)
	}
	if out := mustDocker(t, "run", "--rm", child, "cat", "/marker", "/child"); out != "x\ny\n" {
		t.Errorf("the child image reads %q", out)
	}
}

package e2e

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/husk-vm/husk/e2e/testimages"
)

// TestSystemDF checks the sizes `docker ps -s`, `docker inspect --size`
// and `docker system df` report, and that `docker system prune` composes
// the prunes, with dockerd 20.10's figures: a container's writable layer
// counts the bytes of its files, hard links once, for a stopped container
// and a running one alike.
func TestSystemDF(t *testing.T) {
	requireSuite(t)
	img := pulled(t, testimages.Busybox)
	// Registered first, so removed after the containers that use it.
	vol := namePrefix(t) + "-vol"
	mustDocker(t, "volume", "create", vol)
	t.Cleanup(func() { docker(t, "volume", "rm", "-f", vol) })
	name := containerName(t, "")
	running := containerName(t, "-running")
	mustDocker(t, "run", "--name", name, "--label", "e2e.df=1", "-v", vol+":/v", img,
		"sh", "-c", "echo hell > /f; mkdir -p /d/e; head -c 3000 /dev/zero > /d/e/z; ln /d/e/z /hl; echo abc > /v/x")
	mustDocker(t, "run", "-d", "--name", running, img, "sleep", "1000")
	mustDocker(t, "exec", running, "sh", "-c", "echo hello > /g")

	imgSize, err := strconv.ParseInt(strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Size}}", img)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		rw   int64
	}{{name, 3005}, {running, 6}} {
		got := strings.TrimSpace(mustDocker(t, "inspect", "--size", "-f", "{{.SizeRw}} {{.SizeRootFs}}", tt.name))
		if want := strconv.FormatInt(tt.rw, 10) + " " + strconv.FormatInt(tt.rw+imgSize, 10); got != want {
			t.Errorf("inspect --size %s = %q, want %q", tt.name, got, want)
		}
	}
	if got := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.SizeRw}} {{.SizeRootFs}}", name)); got != "<nil> <nil>" {
		t.Errorf("inspect without --size = %q, want no sizes", got)
	}
	// ps -s words it as go-units does: "3kB (virtual 1.99MB)".
	ps := mustDocker(t, "ps", "-as", "--filter", "name=^"+name+"$", "--format", "{{.Size}}")
	if !regexp.MustCompile(`^3kB \(virtual [0-9.]+MB\)\n$`).MatchString(ps) {
		t.Errorf("ps -s size = %q", ps)
	}
	ps = mustDocker(t, "ps", "-s", "--filter", "name=^"+running+"$", "--format", "{{.Size}}")
	if !regexp.MustCompile(`^6B \(virtual [0-9.]+MB\)\n$`).MatchString(ps) {
		t.Errorf("ps -s size of the running container = %q", ps)
	}

	// The raw answer, as the CLI negotiates it.
	var du struct {
		LayersSize int64
		Images     []struct {
			ID               string `json:"Id"`
			Size, SharedSize int64
			Containers       int64
		}
		Containers []struct {
			Names      []string
			SizeRw     int64
			SizeRootFs int64
		}
		Volumes []struct {
			Name      string
			UsageData struct{ Size, RefCount int64 }
		}
		BuildCache []json.RawMessage
	}
	apiJSON(t, "GET", "/system/df", "", 200, &du)
	imgID := strings.TrimSpace(mustDocker(t, "image", "inspect", "-f", "{{.Id}}", img))
	foundImage := false
	for _, i := range du.Images {
		if i.ID == imgID {
			foundImage = true
			if i.Size != imgSize || i.SharedSize < 0 || i.Containers < 2 {
				t.Errorf("df image %+v: want size %d, a shared size, 2 or more containers", i, imgSize)
			}
		}
	}
	if !foundImage || du.LayersSize < imgSize {
		t.Errorf("df: image %s found %v, LayersSize %d (image %d)", imgID, foundImage, du.LayersSize, imgSize)
	}
	sizes := map[string]int64{}
	for _, c := range du.Containers {
		if len(c.Names) == 1 {
			sizes[c.Names[0]] = c.SizeRw
		}
	}
	if sizes["/"+name] != 3005 || sizes["/"+running] != 6 {
		t.Errorf("df container sizes %v, want %s 3005 and %s 6", sizes, name, running)
	}
	foundVolume := false
	for _, v := range du.Volumes {
		if v.Name == vol {
			foundVolume = v.UsageData.Size == 4 && v.UsageData.RefCount == 1
		}
	}
	if !foundVolume {
		t.Errorf("df volumes %+v: want %s with 4 bytes and 1 reference", du.Volumes, vol)
	}
	if len(du.BuildCache) != 0 {
		t.Errorf("df build cache = %s, want none", du.BuildCache)
	}

	// The tables: a summary row per type, and the verbose listing.
	summary := mustDocker(t, "system", "df")
	if !regexp.MustCompile(`^TYPE +TOTAL +ACTIVE +SIZE +RECLAIMABLE\nImages +\d+ +\d+ +\S+ +\S+ \(\d+%\)\nContainers +\d+ +\d+ +\S+ +\S+ \(\d+%\)\nLocal Volumes +\d+ +\d+ +\S+ +\S+ \(\d+%\)\nBuild Cache +0 +0 +0B +0B\n$`).MatchString(summary) {
		t.Errorf("system df =\n%s", summary)
	}
	verbose := mustDocker(t, "system", "df", "-v")
	for _, re := range []string{
		`(?m)^Images space usage:\n\nREPOSITORY +TAG +IMAGE ID +CREATED +SIZE +SHARED SIZE +UNIQUE SIZE +CONTAINERS$`,
		`(?m)^CONTAINER ID +IMAGE +COMMAND +LOCAL VOLUMES +SIZE +CREATED +STATUS +NAMES$`,
		`(?m) 1 +3kB +.* ` + regexp.QuoteMeta(name) + `$`,
		`(?m) 0 +6B +.* ` + regexp.QuoteMeta(running) + `$`,
		`(?m)^` + regexp.QuoteMeta(vol) + ` +1 +4B$`,
		`(?m)^Build cache usage: 0B$`,
	} {
		if !regexp.MustCompile(re).MatchString(verbose) {
			t.Errorf("system df -v lacks %s:\n%s", re, verbose)
		}
	}

	// At the CLI's API version "type" picks the sections (1.42 and
	// later); dockerd 20.10 (1.41) ignores it and answers everything.
	var ver struct{ APIVersion string }
	apiJSON(t, "GET", "/version", "", 200, &ver)
	got := sendRaw(t, ver.APIVersion, badRequest{method: "GET", path: "/system/df?type=container"})
	var sections map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got.Message), &sections); err != nil || got.Status != 200 {
		t.Fatalf("df?type=container: %d %q", got.Status, got.Message)
	}
	onlyContainers := ver.APIVersion != "1.41"
	if (string(sections["Images"]) == "null") != onlyContainers || string(sections["Containers"]) == "null" {
		t.Errorf("df?type=container at API %s: %s", ver.APIVersion, got.Message)
	}

	// system prune: containers, networks, images and the build cache,
	// each with the filter; the running container stays.
	mustDocker(t, "rm", "-f", running)
	id := strings.TrimSpace(mustDocker(t, "inspect", "-f", "{{.Id}}", name))
	dangling := strings.TrimSpace(mustDocker(t, "commit", name))
	t.Cleanup(func() { docker(t, "rmi", "-f", dangling) })
	for _, tt := range []struct {
		args []string
		want result
	}{
		{[]string{"--filter", "bogus=1"}, result{Code: 1, Stderr: "Error response from daemon: " + unknownFilter("bogus") + "\n"}},
		{[]string{"--volumes", "--filter", "label=e2e.df=nope"}, result{Stdout: "Total reclaimed space: 0B\n"}},
	} {
		if r := docker(t, append([]string{"system", "prune", "-f"}, tt.args...)...); r != tt.want {
			t.Errorf("system prune %q = %+v, want %+v", tt.args, r, tt.want)
		}
	}
	r := docker(t, "system", "prune", "-f", "--filter", "label=e2e.df=1")
	head, total, ok := strings.Cut(r.Stdout, "\nTotal reclaimed space: ")
	if r.Code != 0 || !ok || !strings.HasPrefix(head, "Deleted Containers:\n"+id+"\n\nDeleted Images:\n") ||
		!strings.Contains(head, "deleted: "+dangling+"\n") || !regexp.MustCompile(`^[0-9.]+kB\n$`).MatchString(total) {
		t.Errorf("system prune = %+v", r)
	}
	if r := docker(t, "inspect", name); r.Code != 1 {
		t.Errorf("pruned container still there: %+v", r)
	}
}

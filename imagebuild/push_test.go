package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func layerTar(t *testing.T, name, body string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(body))
	tw.Close()
	return buf.Bytes()
}

// builtChain makes a parent image with one layer and a child with an empty
// step and a second layer, as a build would.
func builtChain(t *testing.T, s *Service) (parent, child string) {
	t.Helper()
	ctx := context.Background()
	l1, err := s.PutLayer(ctx, bytes.NewReader(layerTar(t, "a", "a")))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := s.PutLayer(ctx, bytes.NewReader(layerTar(t, "b", "bb")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.ReleaseLayers(l1, l2)
	at := func(sec int64) v1.Time { return v1.Time{Time: time.Unix(sec, 0)} }
	cfg := v1.ConfigFile{OS: "linux", Architecture: "amd64", History: []v1.History{{CreatedBy: "base", Created: at(1)}}}
	parent, err = s.CreateImage(ctx, cfg, []LayerInfo{l1}, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.History = append(cfg.History, v1.History{CreatedBy: "/bin/sh -c #(nop)  ENV A=1", Created: at(2), EmptyLayer: true})
	mid, err := s.CreateImage(ctx, cfg, []LayerInfo{l1}, parent)
	if err != nil {
		t.Fatal(err)
	}
	cfg.History = append(cfg.History, v1.History{CreatedBy: "/bin/sh -c touch b", Created: at(3)})
	child, err = s.CreateImage(ctx, cfg, []LayerInfo{l1, l2}, mid)
	if err != nil {
		t.Fatal(err)
	}
	return parent, child
}

func TestHistoryFollowsBuildParents(t *testing.T) {
	s := newService(t, "", nil)
	ctx := context.Background()
	parent, child := builtChain(t, s)
	if err := s.Tag(ctx, child, "built", "1"); err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, "built:1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h {
		b, _ := json.Marshal(e)
		got = append(got, string(b))
	}
	mid := h[1].ID
	if len(h) != 3 || h[0].ID != child || h[2].ID != parent || mid == "<missing>" || mid == child {
		t.Fatalf("history IDs = %v", got)
	}
	if h[0].CreatedBy != "/bin/sh -c touch b" || h[0].Size == 0 || h[1].Size != 0 || h[2].Size == 0 {
		t.Errorf("history = %v", got)
	}
	if strings.Join(h[0].Tags, ",") != "built:1" || h[1].Tags != nil {
		t.Errorf("history tags = %v", got)
	}
	if h[0].Created != 3 || h[2].Created != 1 {
		t.Errorf("history times = %v", got)
	}
}

func TestPushBuiltImageAndPullItBack(t *testing.T) {
	host := testRegistry(t, nil)
	s := newService(t, "", nil)
	ctx := context.Background()
	_, child := builtChain(t, s)
	ref := host + "/built/x"
	if err := s.Tag(ctx, child, ref, "v1"); err != nil {
		t.Fatal(err)
	}
	var rec recorder
	if err := s.Push(ctx, ref, "v1", nil, rec.add); err != nil {
		t.Fatalf("push: %v", err)
	}
	st := rec.statuses()
	if st[0] != "|The push refers to repository ["+ref+"]" {
		t.Errorf("first message = %q", st[0])
	}
	var last string
	for _, m := range rec.msgs {
		if m.Status != "" {
			last = m.Status
		}
	}
	if !strings.HasPrefix(last, "v1: digest: sha256:") || !strings.Contains(last, " size: ") {
		t.Errorf("final status = %q", last)
	}
	if aux := rec.msgs[len(rec.msgs)-1].Aux; aux == nil || !strings.Contains(string(*aux), `"Tag":"v1"`) {
		t.Errorf("no aux result at the end: %+v", rec.msgs[len(rec.msgs)-1])
	}
	pushed := 0
	for _, m := range rec.msgs {
		if m.Status == "Pushed" {
			pushed++
		}
	}
	if pushed != 2 {
		t.Errorf("pushed %d layers, want 2: %v", pushed, st)
	}

	// A second push finds both layers there.
	var again recorder
	if err := s.Push(ctx, ref, "v1", nil, again.add); err != nil {
		t.Fatal(err)
	}
	exists := 0
	for _, m := range again.msgs {
		if m.Status == "Layer already exists" {
			exists++
		}
	}
	if exists != 2 {
		t.Errorf("second push: %v", again.statuses())
	}

	// A fresh store pulls the same image ID back.
	s2 := newService(t, "", nil)
	if err := s2.Pull(ctx, ref+":v1", "", nil, nil); err != nil {
		t.Fatalf("pull back: %v", err)
	}
	img, err := s2.Resolve(ctx, ref+":v1")
	if err != nil || img.ID != child {
		t.Errorf("pulled %v (%v), want %s", img, err, child)
	}

	if err := s.Push(ctx, host+"/built/none", "v1", nil, nil); err == nil || err.Error() != "An image does not exist locally with the tag: "+host+"/built/none" {
		t.Errorf("push of a missing tag: %v", err)
	}
}

func TestBuildParentsHiddenAndPruned(t *testing.T) {
	s := newService(t, "", nil)
	ctx := context.Background()
	parent, child := builtChain(t, s)
	if err := s.Tag(ctx, child, "built", "1"); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != child {
		t.Errorf("images = %+v, want only the tagged child", list)
	}
	if all, _ := s.List(ctx, true, nil); len(all) != 3 {
		t.Errorf("images -a lists %d, want 3", len(all))
	}
	resp, err := s.Remove(ctx, "built:1", false, true)
	if err != nil {
		t.Fatal(err)
	}
	var deleted []string
	for _, r := range resp {
		if r.Deleted != "" {
			deleted = append(deleted, r.Deleted)
		}
	}
	if got := strings.Join(deleted, " "); !strings.HasPrefix(got, child+" ") || !strings.Contains(got, parent) {
		t.Errorf("deleted %v, want the child and its untagged parents", deleted)
	}
	if all, _ := s.List(ctx, true, nil); len(all) != 0 {
		t.Errorf("left %d images behind", len(all))
	}
}

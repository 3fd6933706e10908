package main

import (
	"context"
	"io"
	"maps"
	"strings"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/jsonstream"
	"github.com/moby/moby/api/types/registry"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/husk-vm/husk/apicompat"
	"github.com/husk-vm/husk/imagebuild/commit"
	"github.com/husk-vm/husk/imagebuild/reference"
)

// The image store knows nothing of events; imageAPI reports what it did,
// in dockerd's shape: the actor is the reference for pull and push and the
// image ID otherwise, with the image's labels and a "name" attribute.

func (a imageAPI) publish(ctx context.Context, action events.Action, actor, name, labelsOf string) {
	if a.events == nil {
		return
	}
	attrs := map[string]string{}
	if labelsOf != "" {
		if img, err := a.Service.Inspect(ctx, labelsOf); err == nil && img.Config != nil {
			maps.Copy(attrs, img.Config.Labels)
		}
	}
	attrs["name"] = name
	a.events.Publish(events.ImageEventType, action, actor, attrs)
}

// familiar is ref as dockerd names it in events, with a default tag.
func familiar(ref string) (full, name string) {
	n, err := reference.ParseWithDefaultTag(ref)
	if err != nil {
		return ref, ref
	}
	return reference.Familiar(n), reference.FamiliarName(n)
}

func (a imageAPI) Pull(ctx context.Context, ref, platform string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	if err := a.Service.Pull(ctx, ref, platform, auth, progress); err != nil {
		return err
	}
	// A pull of every tag is one event for the bare name, as in dockerd.
	full, name := ref, ref
	if n, err := reference.Parse(ref); err == nil {
		full, name = reference.Familiar(n), reference.FamiliarName(n)
	}
	a.publish(ctx, events.ActionPull, full, name, full)
	return nil
}

func (a imageAPI) Push(ctx context.Context, repo, tag string, auth *registry.AuthConfig, progress func(jsonstream.Message)) error {
	if err := a.Service.Push(ctx, repo, tag, auth, progress); err != nil {
		return err
	}
	ref := repo
	if tag != "" {
		ref += ":" + tag
	}
	full, name := familiar(ref)
	a.publish(ctx, events.ActionPush, full, name, full)
	return nil
}

func (a imageAPI) Tag(ctx context.Context, source, repo, tag string) error {
	if err := a.Service.Tag(ctx, source, repo, tag); err != nil {
		return err
	}
	ref := repo
	if tag != "" {
		ref += ":" + tag
	}
	full, _ := familiar(ref)
	if img, err := a.Service.Inspect(ctx, full); err == nil {
		a.publish(ctx, events.ActionTag, img.ID, full, img.ID)
	}
	return nil
}

func (a imageAPI) Save(ctx context.Context, refs []string, w io.Writer) error {
	if err := a.Service.Save(ctx, refs, w); err != nil {
		return err
	}
	for _, ref := range refs {
		if img, err := a.Service.Inspect(ctx, ref); err == nil {
			a.publish(ctx, events.ActionSave, img.ID, img.ID, img.ID)
		}
	}
	return nil
}

func (a imageAPI) Load(ctx context.Context, r io.Reader, progress func(jsonstream.Message)) error {
	var loaded []string
	err := a.Service.Load(ctx, r, func(m jsonstream.Message) {
		for _, line := range strings.Split(m.Stream, "\n") {
			if ref, ok := strings.CutPrefix(line, "Loaded image: "); ok {
				loaded = append(loaded, ref)
			} else if id, ok := strings.CutPrefix(line, "Loaded image ID: "); ok {
				loaded = append(loaded, id)
			}
		}
		progress(m)
	})
	seen := map[string]bool{}
	for _, ref := range loaded {
		if img, ierr := a.Service.Inspect(ctx, ref); ierr == nil && !seen[img.ID] {
			seen[img.ID] = true
			a.publish(ctx, events.ActionLoad, img.ID, img.ID, img.ID)
		}
	}
	return err
}

// publishRemoval reports an image removal as dockerd does: "untag" per
// removed reference and "delete" per removed image, the image's ID as
// actor and name; the layers the response also lists as deleted (layers
// holds their chain IDs) are no events. labels were read before the
// image went.
func (a imageAPI) publishRemoval(id string, labels map[string]string, layers map[string]bool, resp []image.DeleteResponse) {
	if a.events == nil {
		return
	}
	for _, r := range resp {
		switch {
		case r.Untagged != "" && id != "":
			attrs := maps.Clone(labels)
			if attrs == nil {
				attrs = map[string]string{}
			}
			attrs["name"] = id
			a.events.Publish(events.ImageEventType, events.ActionUnTag, id, attrs)
		case r.Deleted != "" && !layers[r.Deleted]:
			a.events.Publish(events.ImageEventType, events.ActionDelete, r.Deleted, map[string]string{"name": r.Deleted})
		}
	}
}

// imageLabels are ref's labels, for events about an image about to go,
// and the chain IDs of its layers, which cover its ancestors' too.
func (a imageAPI) imageLabels(ctx context.Context, ref string) (id string, labels map[string]string, layers map[string]bool) {
	img, err := a.Service.Inspect(ctx, ref)
	if err != nil {
		return "", nil, nil
	}
	if img.Config != nil {
		labels = img.Config.Labels
	}
	layers = map[string]bool{}
	var diffIDs []digest.Digest
	for _, l := range img.RootFS.Layers {
		diffIDs = append(diffIDs, digest.Digest(l))
	}
	for _, c := range identity.ChainIDs(diffIDs) {
		layers[c.String()] = true
	}
	return img.ID, labels, layers
}

// ValidateImport refuses a bad --change or platform before the upload is
// read.
func (a imageAPI) ValidateImport(opts apicompat.ImportOptions) error {
	return commit.ValidateImport(importOptions(opts))
}

// Import stores the tar as a new image; dockerd reports "import" with the
// image ID as actor and name, after the "tag" of a named import.
func (a imageAPI) Import(ctx context.Context, tar io.Reader, opts apicompat.ImportOptions) (string, error) {
	id, _, err := commit.Import(ctx, a, tar, importOptions(opts))
	if err != nil {
		return "", err
	}
	a.publish(ctx, events.ActionImport, id, id, id)
	return id, nil
}

func importOptions(o apicompat.ImportOptions) commit.ImportOptions {
	return commit.ImportOptions{Repo: o.Repo, Tag: o.Tag, Message: o.Message, Source: o.Source,
		Changes: o.Changes, Platform: o.Platform}
}

// Package commit turns a container's writable layer into an image, as
// `docker commit` does: the layer goes on top of the container's image,
// and the new image's config is the container's, with the --change lines
// applied and dockerd's merge rules filling in what they leave unset.
// The container side (reading the layer out of the VM) is the runtime's;
// this package only sees a tar stream and a config. `docker import` is the
// same act without a container (Import): a tar and --change lines become
// a one-layer image.
package commit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/moby/api/types/container"

	"github.com/husk-vm/husk/imagebuild"
	"github.com/husk-vm/husk/imagebuild/builder"
)

// emptyTarDiffID is the diffID of a tar with no entries: dockerd records
// a commit without changes as an empty layer (history only).
const emptyTarDiffID = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"

// Images is what a commit needs of the image store.
type Images interface {
	Resolve(ctx context.Context, ref string) (*imagebuild.Image, error)
	LayerInfos(ctx context.Context, ref string) ([]imagebuild.LayerInfo, error)
	PutLayer(ctx context.Context, r io.Reader) (imagebuild.LayerInfo, error)
	ReleaseLayers(layers ...imagebuild.LayerInfo)
	CreateImage(ctx context.Context, cfg v1.ConfigFile, layers []imagebuild.LayerInfo, parent string) (string, error)
	Tag(ctx context.Context, source, repo, tag string) error
}

// Container is the committed container as the image side sees it.
type Container struct {
	ID      string
	ImageID string
	Config  *container.Config
}

// Options are POST /commit's parameters beyond the container.
type Options struct {
	// Repo and Tag name the new image; Repo "" leaves it untagged.
	Repo, Tag       string
	Author, Comment string
	// Changes are --change lines (Dockerfile instructions).
	Changes []string
	// Config, when not nil, replaces the container's config as the base
	// the changes apply to (the request body).
	Config *container.Config
}

// Validate checks the options that can be checked before the container's
// layer is read, so that a bad --change costs no VM boot.
func (o Options) Validate(ctr *container.Config) error {
	_, err := o.config(ctr)
	return err
}

// config is the new image's config: the base with the changes applied,
// merged over the container's.
func (o Options) config(ctr *container.Config) (v1.Config, error) {
	base := o.Config
	if base == nil {
		base = ctr
	}
	cfg, err := toV1(base)
	if err != nil {
		return v1.Config{}, err
	}
	if err := builder.ApplyChanges(&cfg, o.Changes); err != nil {
		return v1.Config{}, err
	}
	from, err := toV1(ctr)
	if err != nil {
		return v1.Config{}, err
	}
	merge(&cfg, from)
	return cfg, nil
}

// Write stores layer (the container's writable layer as an OCI tar, read
// to its end) as a new image on top of the container's image and tags it
// when opts names a repository. It returns the image ID and the familiar
// reference it was tagged with ("" when untagged).
func Write(ctx context.Context, images Images, ctr Container, opts Options, layer io.Reader) (id, ref string, err error) {
	cfg, err := opts.config(ctr.Config)
	if err != nil {
		return "", "", err
	}
	parent, err := images.Resolve(ctx, ctr.ImageID)
	if err != nil {
		return "", "", fmt.Errorf("image of the container: %w", err)
	}
	layers, err := images.LayerInfos(ctx, parent.ID)
	if err != nil {
		return "", "", err
	}
	info, err := images.PutLayer(ctx, layer)
	if err != nil {
		return "", "", fmt.Errorf("store the container's layer: %w", err)
	}
	defer images.ReleaseLayers(info)
	empty := info.DiffID.String() == emptyTarDiffID
	if !empty {
		layers = append(layers, info)
	}
	now := time.Now().UTC()
	var cmd []string
	if ctr.Config != nil {
		cmd = ctr.Config.Cmd
	}
	file := v1.ConfigFile{
		Architecture: parent.Config.Architecture,
		Variant:      parent.Config.Variant,
		OS:           parent.Config.OS,
		OSVersion:    parent.Config.OSVersion,
		OSFeatures:   parent.Config.OSFeatures,
		Author:       opts.Author,
		Container:    ctr.ID,
		Created:      v1.Time{Time: now},
		Config:       cfg,
		History: append(slices.Clone(parent.Config.History), v1.History{
			Created: v1.Time{Time: now}, Author: opts.Author, Comment: opts.Comment,
			CreatedBy: strings.Join(cmd, " "), EmptyLayer: empty,
		}),
	}
	id, err = images.CreateImage(ctx, file, layers, parent.ID)
	if err != nil {
		return "", "", err
	}
	if ref, err = tagNew(ctx, images, id, opts.Repo, opts.Tag); err != nil {
		return "", "", err
	}
	return id, ref, nil
}

// tagger is the part of the image store that names images.
type tagger interface {
	Tag(ctx context.Context, source, repo, tag string) error
}

// tagNew tags a new image repo:tag unless repo is "", and returns the
// familiar reference it was tagged with ("" when untagged).
func tagNew(ctx context.Context, images tagger, id, repo, tag string) (string, error) {
	if repo == "" {
		return "", nil
	}
	if err := images.Tag(ctx, id, repo, tag); err != nil {
		return "", err
	}
	if tag != "" {
		repo += ":" + tag
	}
	return repo, nil
}

// toV1 converts an API container config into an image config; the two
// share their JSON form.
func toV1(c *container.Config) (v1.Config, error) {
	var out v1.Config
	if c == nil {
		return out, nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return out, fmt.Errorf("encode container config: %w", err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("convert container config: %w", err)
	}
	return out, nil
}

// merge fills what the user's config leaves unset from the container's,
// following dockerd's merge for commits.
func merge(user *v1.Config, from v1.Config) {
	if user.User == "" {
		user.User = from.User
	}
	if len(user.ExposedPorts) == 0 {
		user.ExposedPorts = from.ExposedPorts
	} else {
		for p := range from.ExposedPorts {
			user.ExposedPorts[p] = struct{}{}
		}
	}
	if len(user.Env) == 0 {
		user.Env = from.Env
	} else {
		for _, e := range from.Env {
			k, _, _ := strings.Cut(e, "=")
			if !slices.ContainsFunc(user.Env, func(u string) bool { uk, _, _ := strings.Cut(u, "="); return uk == k }) {
				user.Env = append(user.Env, e)
			}
		}
	}
	if user.Labels == nil {
		user.Labels = map[string]string{}
	}
	for k, v := range from.Labels {
		if _, ok := user.Labels[k]; !ok {
			user.Labels[k] = v
		}
	}
	if len(user.Entrypoint) == 0 {
		if len(user.Cmd) == 0 {
			user.Cmd = from.Cmd
		}
		if user.Entrypoint == nil {
			user.Entrypoint = from.Entrypoint
		}
	}
	if from.Healthcheck != nil {
		if user.Healthcheck == nil {
			user.Healthcheck = from.Healthcheck
		} else {
			h, f := user.Healthcheck, from.Healthcheck
			if len(h.Test) == 0 {
				h.Test = f.Test
			}
			if h.Interval == 0 {
				h.Interval = f.Interval
			}
			if h.Timeout == 0 {
				h.Timeout = f.Timeout
			}
			if h.StartPeriod == 0 {
				h.StartPeriod = f.StartPeriod
			}
			if h.Retries == 0 {
				h.Retries = f.Retries
			}
		}
	}
	if user.WorkingDir == "" {
		user.WorkingDir = from.WorkingDir
	}
	if len(user.Volumes) == 0 {
		user.Volumes = from.Volumes
	} else {
		maps.Copy(user.Volumes, from.Volumes)
	}
	if user.StopSignal == "" {
		user.StopSignal = from.StopSignal
	}
}

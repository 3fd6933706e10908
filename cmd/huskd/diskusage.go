package main

import "context"

// ImageSize lets the runtime report a container's SizeRootFs (its layer
// plus its image).
func (a imageSource) ImageSize(ctx context.Context, imageID string) (int64, error) {
	return a.s.ImageSize(ctx, imageID)
}

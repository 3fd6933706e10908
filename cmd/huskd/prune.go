package main

import (
	"context"
	"strconv"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/image"
)

// Prune removes images through Remove, so that each removal has its
// events and drops its base disk, then reports the prune as dockerd does.
func (a imageAPI) Prune(ctx context.Context, filters map[string][]string) (image.PruneReport, error) {
	rep, err := a.Service.Prune(ctx, filters, a.Remove)
	if err != nil {
		return rep, err
	}
	if a.events != nil {
		a.events.Publish(events.ImageEventType, events.ActionPrune, "", map[string]string{"reclaimed": strconv.FormatUint(rep.SpaceReclaimed, 10)})
	}
	return rep, nil
}

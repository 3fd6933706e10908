package rootfs

import (
	"context"
	"io"
	"log/slog"
)

// Flatten writes the merged view of layers (base first, OCI whiteouts
// applied, every path once, hard links after their targets) to w as one
// tar: what a base disk is made from, for readers that want files rather
// than a disk, such as the Dockerfile builder's COPY --from. Each opener
// is called twice.
func Flatten(ctx context.Context, w io.Writer, layers []LayerOpener) error {
	pl, err := planLayers(ctx, slog.New(slog.DiscardHandler), layers)
	if err != nil {
		return err
	}
	return writeFlat(ctx, w, pl, layers)
}

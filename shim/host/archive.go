package host

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/husk-vm/husk/shim/proto"
)

// ArchiveStat describes a path in the container root.
func (c *Client) ArchiveStat(ctx context.Context, path string) (proto.PathStat, error) {
	resp, err := c.simple(ctx, proto.Request{Op: proto.OpArchiveStat, Archive: &proto.ArchiveSpec{Path: path}})
	if err != nil {
		return proto.PathStat{}, err
	}
	if resp.Stat == nil {
		return proto.PathStat{}, fmt.Errorf("agent answered %s without a stat", proto.OpArchiveStat)
	}
	return *resp.Stat, nil
}

// ArchiveGet returns a path's stat and the tar stream of it; closing the
// reader before its end stops the agent.
func (c *Client) ArchiveGet(ctx context.Context, path string) (proto.PathStat, io.ReadCloser, error) {
	cl, resp, err := c.do(ctx, proto.Request{Op: proto.OpArchiveGet, Archive: &proto.ArchiveSpec{Path: path}})
	if err != nil {
		return proto.PathStat{}, nil, err
	}
	if resp.Stat == nil {
		cl.Close()
		return proto.PathStat{}, nil, fmt.Errorf("agent answered %s without a stat", proto.OpArchiveGet)
	}
	return *resp.Stat, cl, nil
}

// ArchivePut extracts the tar stream r into the directory spec.Path. ctx
// bounds the whole transfer.
func (c *Client) ArchivePut(ctx context.Context, spec proto.ArchiveSpec, r io.Reader) error {
	cl, _, err := c.do(ctx, proto.Request{Op: proto.OpArchivePut, Archive: &spec})
	if err != nil {
		return err
	}
	defer cl.Close()
	stop := context.AfterFunc(ctx, func() { cl.st.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.Copy(cl.st, r); err != nil {
		return fmt.Errorf("send archive: %w", err)
	}
	// Half-close: the agent reads the end of the archive, then answers.
	if err := cl.st.Close(); err != nil {
		return fmt.Errorf("send archive: %w", err)
	}
	resp, err := cl.readResponse()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	if resp.Error != "" {
		return &AgentError{Kind: resp.Kind, Message: resp.Error}
	}
	return nil
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// defaultHost is huskd's default socket.
const defaultHost = "unix:///run/husk/docker.sock"

// forkCommand is `husk fork CONTAINER --checkpoint X -n N`.
//
// It calls huskd's own POST /husk/containers/{name}/fork rather than
// composing the Docker API (inspect, N creates, N starts with a
// checkpoint-dir): the daemon knows where a container's checkpoints live
// (a client would have to guess huskd's on-disk layout to name the
// checkpoint-dir), verifies the checkpoint once instead of N times,
// restores the N VMs concurrently, and removes every fork if one fails —
// none of which a sequence of Docker API calls can promise.
func forkCommand() *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     "create N containers like CONTAINER and restore a checkpoint of it into each, concurrently",
		ArgsUsage: "CONTAINER",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "checkpoint", Required: true, Usage: "checkpoint to restore (docker checkpoint create)"},
			&cli.StringFlag{Name: "checkpoint-dir", Usage: "directory holding the checkpoint, if not the container's own"},
			&cli.IntFlag{Name: "count", Aliases: []string{"n"}, Value: 1, Usage: "number of containers to make"},
			&cli.StringFlag{Name: "host", Aliases: []string{"H"}, EnvVars: []string{"DOCKER_HOST"}, Value: defaultHost, Usage: "huskd's socket"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("fork needs exactly one CONTAINER, got %d arguments", c.NArg())
			}
			names, err := fork(c.Context, c.String("host"), c.Args().First(), c.String("checkpoint"), c.String("checkpoint-dir"), c.Int("count"))
			for _, n := range names {
				fmt.Fprintln(c.App.Writer, n)
			}
			return err
		},
	}
}

// forkArgsFirst lets `husk fork CONTAINER --checkpoint X` be written as the
// issue and docker's own commands put it: urfave/cli stops reading flags at
// the first argument, so the container moves behind the flags.
func forkArgsFirst(args []string) []string {
	if len(args) < 4 || args[1] != "fork" || strings.HasPrefix(args[2], "-") {
		return args
	}
	out := append([]string{args[0], args[1]}, args[3:]...)
	return append(out, args[2])
}

// fork asks huskd at host for the forks and returns their names.
func fork(ctx context.Context, host, ctr, checkpoint, dir string, n int) ([]string, error) {
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		return nil, fmt.Errorf("host %q: only unix:// sockets are supported", host)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	q := url.Values{"checkpoint": {checkpoint}, "count": {strconv.Itoa(n)}}
	if dir != "" {
		q.Set("checkpoint-dir", dir)
	}
	u := "http://huskd/husk/containers/" + url.PathEscape(ctr) + "/fork?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ask huskd to fork: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read huskd's answer: %w", err)
	}
	if resp.StatusCode != http.StatusCreated {
		var e struct{ Message string }
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			return nil, fmt.Errorf("fork %s: %s", ctr, e.Message)
		}
		return nil, fmt.Errorf("fork %s: huskd answered %s", ctr, resp.Status)
	}
	var forks []struct{ ID, Name string }
	if err := json.Unmarshal(body, &forks); err != nil {
		return nil, fmt.Errorf("decode huskd's answer: %w", err)
	}
	names := make([]string, len(forks))
	for i, f := range forks {
		names[i] = f.Name
	}
	return names, nil
}

package apicompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// parseForm parses the query (and a form body) the way dockerd's
// httputils.ParseForm does: a body with a content type net/http cannot
// parse as a form is not an error.
func parseForm(r *http.Request) error {
	if err := r.ParseForm(); err != nil && !strings.HasPrefix(err.Error(), "mime:") {
		return errdefs.ErrInvalidArgument.WithMessage(err.Error())
	}
	return nil
}

// boolValue is dockerd's httputils.BoolValue: anything but "", "0", "no",
// "false" and "none" is true.
func boolValue(r *http.Request, k string) bool {
	switch strings.ToLower(strings.TrimSpace(r.FormValue(k))) {
	case "", "0", "no", "false", "none":
		return false
	default:
		return true
	}
}

// boolValueOrDefault is boolValue with a default for an absent key.
func boolValueOrDefault(r *http.Request, k string, def bool) bool {
	if _, ok := r.Form[k]; !ok {
		return def
	}
	return boolValue(r, k)
}

// uint32Value is dockerd's httputils.Uint32Value, including its bare
// strconv error messages.
func uint32Value(r *http.Request, k string) (uint32, error) {
	v, neg := strings.CutPrefix(r.Form.Get(k), "-")
	if v == "" || v[0] == '+' {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, errors.Unwrap(err)
	}
	if neg {
		return 0, strconv.ErrRange
	}
	return uint32(n), nil
}

// checkForJSON is dockerd's httputils.CheckForJSON: a body must be
// declared application/json; no Content-Type is fine without a body.
func checkForJSON(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" && (r.Body == nil || r.ContentLength == 0) {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("malformed Content-Type header (%s): %v", ct, err))
	}
	if mt != "application/json" {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("unsupported Content-Type header (%s): must be 'application/json'", ct))
	}
	return nil
}

// decodeJSONBody decodes exactly one JSON document, with dockerd's
// messages for the ways that fails. An empty body is an error here; the
// callers that accept one check ContentLength first.
func decodeJSONBody(body io.Reader, out any) error {
	dec := json.NewDecoder(body)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return errdefs.ErrInvalidArgument.WithMessage("invalid JSON: got EOF while reading request body")
		}
		return errdefs.ErrInvalidArgument.WithMessage("invalid JSON: " + err.Error())
	}
	if dec.More() {
		return errdefs.ErrInvalidArgument.WithMessage("unexpected content after JSON")
	}
	return nil
}

// readJSON is dockerd's httputils.ReadJSON, which the endpoints other than
// container create use since moby v23: the body must be declared JSON, and
// an empty one is not an error but leaves out as it is.
func readJSON(r *http.Request, out any) error {
	if err := checkForJSON(r); err != nil {
		return err
	}
	if r.Body == nil || r.ContentLength == 0 {
		return nil
	}
	return decodeJSONBody(r.Body, out)
}

// parseFilters reads the "filters" query parameter in both encodings moby's
// filters package accepts: {"key":["v"]} and the older {"key":{"v":true}}.
func parseFilters(r *http.Request) (map[string][]string, error) {
	raw := r.Form.Get("filters")
	if raw == "" {
		return map[string][]string{}, nil
	}
	var sets map[string]map[string]bool
	if err := json.Unmarshal([]byte(raw), &sets); err == nil {
		out := make(map[string][]string, len(sets))
		for k, vs := range sets {
			list := make([]string, 0, len(vs))
			// moby keeps a value whatever its boolean; so do we.
			for v := range vs {
				list = append(list, v)
			}
			slices.Sort(list)
			out[k] = list
		}
		return out, nil
	}
	var lists map[string][]string
	if err := json.Unmarshal([]byte(raw), &lists); err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage("invalid filter")
	}
	if lists == nil {
		lists = map[string][]string{}
	}
	return lists, nil
}

// parseUnixTimestamp reads dockerd's "seconds[.nanoseconds]" form of since
// and until; the docker CLI converts durations and dates before sending.
func parseUnixTimestamp(value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	secs, frac, _ := strings.Cut(value, ".")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		var numErr *strconv.NumError
		if errors.As(err, &numErr) {
			err = numErr.Err
		}
		return time.Time{}, fmt.Errorf("invalid timestamp %q: invalid seconds %q: %w", value, secs, err)
	}
	if frac == "" {
		return time.Unix(sec, 0).UTC(), nil
	}
	const maxFracDigits = 20
	if len(frac) > maxFracDigits {
		return time.Time{}, fmt.Errorf("invalid timestamp %q: invalid nanoseconds: length %d exceeds maximum %d", value, len(frac), maxFracDigits)
	}
	var nsec int64
	for i := range len(frac) {
		c := frac[i]
		if c < '0' || c > '9' {
			return time.Time{}, fmt.Errorf("invalid timestamp %q: invalid nanoseconds: invalid character %q at position %d", value, c, i)
		}
		if i < 9 {
			nsec = nsec*10 + int64(c-'0')
		}
	}
	for i := len(frac); i < 9; i++ {
		nsec *= 10
	}
	return time.Unix(sec, nsec).UTC(), nil
}

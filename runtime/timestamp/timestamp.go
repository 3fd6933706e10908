// Package timestamp reads the times Docker's filters take ("until" for
// prune and image lists) as dockerd does: a Go duration before now, an RFC
// 3339 time or date (in local time when it names no zone), or Unix
// seconds with an optional fraction. dockerd's parser is internal to its
// module, so this is its behaviour and its 20.10 wording, written again.
package timestamp

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse reads value relative to now.
func Parse(value string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(value); value != "0" && err == nil {
		return now.Add(-d), nil
	}
	// A zone given as Z or +hh:mm, or as a third dash ("-07:00"), is
	// parsed; any other time is local.
	local := !strings.ContainsAny(value, "zZ+") && strings.Count(value, "-") != 3
	var layout string
	switch {
	case strings.Contains(value, "."):
		layout = time.RFC3339Nano
		if local {
			layout = "2006-01-02T15:04:05.999999999"
		}
	case strings.Contains(value, "T"):
		colons := strings.Count(value, ":")
		if !local && !strings.ContainsAny(value, "zZ") && colons > 0 {
			colons-- // the zone's own
		}
		layouts := []string{"2006-01-02T15Z07:00", "2006-01-02T15:04Z07:00", time.RFC3339}
		if local {
			layouts = []string{"2006-01-02T15", "2006-01-02T15:04", "2006-01-02T15:04:05"}
		}
		layout = layouts[min(colons, 2)]
	case local:
		layout = "2006-01-02"
	default:
		layout = "2006-01-02Z07:00"
	}
	var t time.Time
	var err error
	if local {
		t, err = time.ParseInLocation(layout, value, now.Location())
	} else {
		t, err = time.Parse(layout, value)
	}
	if err == nil {
		return t, nil
	}
	if strings.Contains(value, "-") {
		// Meant as a date: the parser's own error says what is wrong.
		return time.Time{}, err
	}
	if t, ok := unixSeconds(value); ok {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("failed to parse value as time or duration: %q", value)
}

// unixSeconds reads "seconds[.fraction]".
func unixSeconds(value string) (time.Time, bool) {
	secs, frac, _ := strings.Cut(value, ".")
	s, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var ns int64
	if frac != "" {
		if ns, err = strconv.ParseInt((frac + "000000000")[:9], 10, 64); err != nil || ns < 0 {
			return time.Time{}, false
		}
	}
	return time.Unix(s, ns), true
}

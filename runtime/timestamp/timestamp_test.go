package timestamp

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2024, 5, 6, 12, 0, 0, 0, time.FixedZone("X", 2*3600))
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr string
	}{
		{in: "1h", want: now.Add(-time.Hour)},
		{in: "1700000000", want: time.Unix(1700000000, 0)},
		{in: "1700000000.5", want: time.Unix(1700000000, 500000000)},
		{in: "0", want: time.Unix(0, 0)},
		{in: "2024-01-02", want: time.Date(2024, 1, 2, 0, 0, 0, 0, now.Location())},
		{in: "2024-01-02T03:04:05", want: time.Date(2024, 1, 2, 3, 4, 5, 0, now.Location())},
		{in: "2024-01-02T03:04", want: time.Date(2024, 1, 2, 3, 4, 0, 0, now.Location())},
		{in: "2024-01-02T03:04:05Z", want: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)},
		{in: "2024-01-02T03:04:05.25+01:00", want: time.Date(2024, 1, 2, 2, 4, 5, 250000000, time.UTC)},
		{in: "nonsense", wantErr: `failed to parse value as time or duration: "nonsense"`},
		{in: "", wantErr: `failed to parse value as time or duration: ""`},
		{in: "2024-13-01", wantErr: `parsing time "2024-13-01": month out of range`},
	} {
		got, err := Parse(tc.in, now)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("Parse(%q) = %v, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

package containers

import (
	"testing"
	"time"
)

func TestPsColumns(t *testing.T) {
	now := time.Date(2026, 3, 4, 15, 30, 0, 0, time.Local)
	tests := []struct{ got, want string }{
		{cpuTime(0), "00:00:00"},
		{cpuTime(3725 * time.Second), "01:02:05"},
		{cpuTime(26 * time.Hour), "1-02:00:00"},
		{startTime(now.Add(-time.Hour), now), "14:30"},
		{startTime(now.Add(-48*time.Hour), now), "Mar02"},
		{cpuPercent(time.Second, 4*time.Second), "25"},
		{cpuPercent(time.Second, 0), "0"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

package apicompat

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/events"

	huskevents "github.com/husk-vm/husk/runtime/events"
)

// eventTimes blanks the times of encoded events, which the bus takes
// from the clock.
var eventTimes = regexp.MustCompile(`"time":\d+,"timeNano":\d+`)

func TestEvents(t *testing.T) {
	bus := huskevents.New(0)
	srv := httptest.NewServer(New(Config{Events: bus, APIVersion: "1.52"}))
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, eventTimes.ReplaceAllString(string(b), `"time":T`)
	}

	bus.Publish(events.ContainerEventType, events.ActionStart, "c1", map[string]string{"image": "busybox", "name": "web"})
	bus.Publish(events.ImageEventType, events.ActionTag, "sha256:aa", map[string]string{"name": "x:1"})
	bus.Publish(events.NetworkEventType, events.ActionCreate, "n1", map[string]string{"name": "net"})
	// An until after every event and before the request is served: the
	// replay is the whole answer.
	now := time.Now()
	until := fmt.Sprintf("%d.%09d", now.Unix(), now.Nanosecond())
	for _, tt := range []struct {
		path, want string
	}{
		{`/v1.50/events?since=1&until=2`, ``},
		{`/v1.50/events?since=1&until=` + until + `&filters={"type":["container"]}`,
			`{"status":"start","id":"c1","from":"busybox","Type":"container","Action":"start","Actor":{"ID":"c1","Attributes":{"image":"busybox","name":"web"}},"scope":"local","time":T}` + "\n"},
		{`/v1.50/events?since=1&until=` + until + `&filters={"type":["image"]}`,
			`{"status":"tag","id":"sha256:aa","Type":"image","Action":"tag","Actor":{"ID":"sha256:aa","Attributes":{"name":"x:1"}},"scope":"local","time":T}` + "\n"},
		{`/v1.52/events?since=1&until=` + until + `&filters={"type":["container"]}`,
			`{"Type":"container","Action":"start","Actor":{"ID":"c1","Attributes":{"image":"busybox","name":"web"}},"scope":"local","time":T}` + "\n"},
		{`/v1.50/events?since=1&until=` + until + `&filters={"type":["network"],"event":["create"]}`,
			`{"Type":"network","Action":"create","Actor":{"ID":"n1","Attributes":{"name":"net"}},"scope":"local","time":T}` + "\n"},
	} {
		code, body := get(tt.path)
		if code != http.StatusOK || body != tt.want {
			t.Errorf("%s:\n got %d %s\nwant 200 %s", tt.path, code, body, tt.want)
		}
	}

	if code, body := get("/v1.50/events?since=5&until=4"); code != http.StatusBadRequest || !strings.Contains(body, "`since` time (5) cannot be after `until` time (4)") {
		t.Errorf("since after until: %d %s", code, body)
	}
	if code, _ := get("/v1.50/events?since=x"); code != http.StatusBadRequest {
		t.Errorf("bad since: %d", code)
	}
}

func TestEventsLive(t *testing.T) {
	bus := huskevents.New(0)
	srv := httptest.NewServer(New(Config{Events: bus}))
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL + `/events?filters={"event":["die"]}`)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// The headers arrive before any event: the subscription is in place.
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	bus.Publish(events.ContainerEventType, events.ActionStart, "c1", nil)
	bus.Publish(events.ContainerEventType, events.ActionDie, "c1", map[string]string{"exitCode": "3"})
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, `"Action":"die"`) || !strings.Contains(line, `"exitCode":"3"`) {
		t.Errorf("first live event = %s", line)
	}
}

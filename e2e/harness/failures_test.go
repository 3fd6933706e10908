package harness

import (
	"io"
	"strings"
	"testing"
)

func TestFailuresSummary(t *testing.T) {
	tests := []struct {
		name, output, want string
	}{
		{
			name: "all passed",
			output: `=== RUN   TestA
    a_test.go:10: $ docker run x
          exit 0, stdout "", stderr ""
--- PASS: TestA (1.00s)
`,
			want: "",
		},
		{
			name: "an assertion hidden by the daemon log",
			output: `=== RUN   TestA
--- PASS: TestA (1.00s)
=== RUN   TestLinks
    network_test.go:399: $ docker run --rm x
          exit 0, stdout "10.0.0.2\n", stderr ""
    network_test.go:410: the linking container sees
        10.0.0.2
        DB_NAME=/web/db
        DB_PORT=tcp://10.0.0.2:5432
        DB_PORT_5432_TCP=tcp://10.0.0.2:5432
    ops_test.go:143: POST /containers/x/wait ""
          200 "{}"
    network_test.go:444: $ docker rm -f db
          exit 0, stdout "db\n", stderr ""
    docker_test.go:34: last lines of the huskd log (/tmp/d.log):
        time=... msg="container removed"
--- FAIL: TestLinks (4.86s)
=== RUN   TestB
    b_test.go:5: $ docker ps
          exit 0, stdout "", stderr ""
--- PASS: TestB (0.10s)
`,
			want: `e2e: what the 1 failed test(s) said, without their commands and daemon logs:
TestLinks
    network_test.go:410: the linking container sees
        10.0.0.2
        DB_NAME=/web/db
        DB_PORT=tcp://10.0.0.2:5432
`,
		},
		{
			name: "a failed subtest and a fatal command",
			output: `=== RUN   TestPause
=== RUN   TestPause/dockerd
    pause_test.go:20: uptime went from 5.04 to 5.38
    --- FAIL: TestPause/dockerd (3.00s)
--- FAIL: TestPause (3.00s)
=== RUN   TestC
    c_test.go:7: $ docker start c
          exit 1, stdout "", stderr "no"
    c_test.go:7: docker start c: exit 1: no
--- FAIL: TestC (0.20s)
=== RUN   TestD
--- FAIL: TestD (0.01s)
`,
			want: `e2e: what the 3 failed test(s) said, without their commands and daemon logs:
TestPause
    pause_test.go:20: uptime went from 5.04 to 5.38
TestC
    c_test.go:7: docker start c: exit 1: no
TestD
    (nothing besides its commands)
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Failures
			// Written in pieces that split lines, as a pipe delivers them.
			for r := strings.NewReader(tt.output); ; {
				b := make([]byte, 37)
				n, err := r.Read(b)
				f.Write(b[:n])
				if err == io.EOF {
					break
				}
			}
			if got := f.Summary(); got != tt.want {
				t.Errorf("summary:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

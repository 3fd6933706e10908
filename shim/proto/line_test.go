package proto

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	tests := []struct {
		name, in string
		want     []string
		err      error // of the read after the lines
	}{
		{name: "short lines", in: "a\nbc\n", want: []string{"a\n", "bc\n"}, err: io.EOF},
		{name: "a line longer than the buffer", in: long + "\nnext\n", want: []string{long + "\n", "next\n"}, err: io.EOF},
		{name: "a long line cut short", in: long, want: nil, err: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			for _, w := range tt.want {
				got, err := ReadLine(r)
				if err != nil || string(got) != w {
					t.Fatalf("ReadLine: %d bytes, %v; want %d bytes", len(got), err, len(w))
				}
			}
			if _, err := ReadLine(r); !errors.Is(err, tt.err) {
				t.Fatalf("last ReadLine: %v, want %v", err, tt.err)
			}
		})
	}
	over := bufio.NewReaderSize(io.MultiReader(strings.NewReader(strings.Repeat("y", MaxLine+1)), strings.NewReader("\n")), 4096)
	if _, err := ReadLine(over); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("ReadLine of a line over MaxLine: %v", err)
	}
}

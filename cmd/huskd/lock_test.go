package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestLockRoot(t *testing.T) {
	root := t.TempDir()
	first, err := lockRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockRoot(root)
	want := "another huskd (pid " + strconv.Itoa(os.Getpid()) + ") is using " + root
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("second lock: %v, want %q...", err, want)
	}
	first.Close()
	again, err := lockRoot(root)
	if err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	again.Close()
}

package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	pkgerrors "github.com/pkg/errors"
	"github.com/sirupsen/logrus"
)

func TestSlogHook(t *testing.T) {
	var buf bytes.Buffer
	l := logrus.New()
	l.SetOutput(&bytes.Buffer{})
	l.AddHook(slogHook{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	l.WithError(pkgerrors.WithStack(errors.New("gone"))).Warn("healthcheck failed")
	got := buf.String()
	if !strings.Contains(got, `level=DEBUG msg="healthcheck failed" logrus_level=warning error=gone`) {
		t.Errorf("logged %q", got)
	}
	if strings.Contains(got, ".go:") {
		t.Errorf("the error's stack was logged: %q", got)
	}
}

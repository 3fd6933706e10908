package main

import (
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// routeLogrus sends what BuildKit's libraries log through logrus (the
// session manager's health checks, chiefly, which fail as a matter of
// course when a client goes) to logger at debug level, instead of to
// stderr in logrus's own format.
func routeLogrus(logger *slog.Logger) {
	logrus.SetOutput(io.Discard)
	logrus.SetLevel(logrus.DebugLevel)
	logrus.AddHook(slogHook{logger})
}

type slogHook struct{ log *slog.Logger }

func (slogHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h slogHook) Fire(e *logrus.Entry) error {
	args := make([]any, 0, 2*len(e.Data)+2)
	args = append(args, "logrus_level", e.Level.String())
	for k, v := range e.Data {
		if err, ok := v.(error); ok {
			// slog would print pkg/errors' stack with %+v.
			v = err.Error()
		}
		args = append(args, k, v)
	}
	h.log.Debug(e.Message, args...)
	return nil
}

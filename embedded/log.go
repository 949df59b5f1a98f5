package embedded

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// LevelTrace is the slog level of the server's trace output (protocol
// tracing); it is enabled only when the logger enables this level.
const LevelTrace = slog.LevelDebug - 4

// logAdapter implements server.Logger on top of slog. Fatalf logs at error
// level and records the failure for Start to return; it never exits.
type logAdapter struct {
	logger *slog.Logger

	mu       sync.Mutex
	fatalErr error
}

func newLogAdapter(logger *slog.Logger) *logAdapter {
	return &logAdapter{logger: logger}
}

func (a *logAdapter) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if !a.logger.Enabled(ctx, level) {
		return
	}
	a.logger.Log(ctx, level, fmt.Sprintf(format, v...))
}

func (a *logAdapter) Noticef(format string, v ...any) { a.log(slog.LevelInfo, format, v) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a *logAdapter) Errorf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a *logAdapter) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a *logAdapter) Tracef(format string, v ...any)  { a.log(LevelTrace, format, v) }

// Fatalf records the first fatal error. nats-server calls it when a
// listener cannot be opened or JetStream cannot start.
func (a *logAdapter) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	a.logger.Error(msg, "fatal", true)
	a.mu.Lock()
	if a.fatalErr == nil {
		a.fatalErr = &FatalError{Msg: msg}
	}
	a.mu.Unlock()
}

func (a *logAdapter) fatal() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fatalErr
}

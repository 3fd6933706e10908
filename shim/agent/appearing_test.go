package agent

import (
	"context"
	"errors"
	"syscall"
	"testing"
)

// TestWhileAppearing: an open that fails because its disk is not
// openable yet is tried again until it is; any other outcome ends it at
// once; a disk that never appears gives up with the open's error.
func TestWhileAppearing(t *testing.T) {
	for _, tc := range []struct {
		name      string
		errs      []error // what each try returns; past its end, the last
		ctx       func() context.Context
		wantErr   error
		wantTries int
	}{
		{"opens at once", []error{nil}, context.Background, nil, 1},
		{"no device yet", []error{syscall.ENXIO, syscall.ENXIO, nil}, context.Background, nil, 3},
		{"no node yet", []error{syscall.ENOENT, syscall.ENXIO, nil}, context.Background, nil, 3},
		{"another error", []error{syscall.ENXIO, syscall.EINVAL}, context.Background, syscall.EINVAL, 2},
		{"never appears", []error{syscall.ENXIO}, func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, syscall.ENXIO, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			err := whileAppearing(tc.ctx(), func() error {
				err := tc.errs[min(tries, len(tc.errs)-1)]
				tries++
				return err
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
		})
	}
}

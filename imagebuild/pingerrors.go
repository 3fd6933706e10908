package imagebuild

import (
	"errors"
	"reflect"
)

// pingError picks, of the two errors go-containerregistry collects when a
// registry's ping fails over https and then over plain http, the one
// dockerd reports: it tries the same endpoints in the same order and
// returns the last one's error for an insecure registry (plain http), the
// https one's otherwise (its http attempt never happens). Any other error
// is returned as it is.
//
// go-containerregistry's joined error is an unexported []error without
// Unwrap() []error, so the slice is read through reflection.
func pingError(err error, insecure bool) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Slice || v.Type().Elem() != reflect.TypeFor[error]() || v.Len() != 2 {
			continue
		}
		i := 0
		if insecure {
			i = 1
		}
		if picked, ok := v.Index(i).Interface().(error); ok && picked != nil {
			return picked
		}
		return err
	}
	return err
}

// Package e2e holds husk's end-to-end tests: the stock docker CLI drives a
// real daemon — huskd, or Debian's dockerd as the reference — that pulls
// test images from a real registry, all inside a network namespace the
// suite creates. The tests live in _test files; see README.md for how to
// run them. testimages builds the images and harness runs the daemons; both
// are shared with the benchmarks.
package e2e

// Package testcontainers holds the testcontainers-go end-to-end test. It is
// a module of its own so that testcontainers-go and its dependencies stay
// out of husk's go.mod; e2e.TestTestcontainers runs it against the suite's
// daemon, inside the suite's network namespace.
package testcontainers

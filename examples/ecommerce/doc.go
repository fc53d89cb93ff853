// Package ecommerce is an example: the event-driven checkout of the seed
// article as five programs talking only through Strata topics. See
// README.md. The programs are under cmd/, their code in internal/service,
// the events they share in events/, and ecommerce_test.go runs them all
// against a real node, killing and restarting one mid-stream.
package ecommerce

//go:build !kfake

package main

import "github.com/spf13/cobra"

// benchKfakeServerCommand is nil without -tags kfake: the release binary
// has no kfake baseline (see bench_kfake.go).
func benchKfakeServerCommand() *cobra.Command { return nil }

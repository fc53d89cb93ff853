//go:build kfake

package main

import (
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The kfake baseline of strata bench: built only with -tags kfake, so that
// the release binary does not link franz-go's fake broker.

func benchKfakeServerCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "kfake-server",
		Short:  "Run franz-go's kfake with one broker; prints its address, exits when stdin closes",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintln(cmd.OutOrStdout(), c.ListenAddrs()[0])
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, cmd.InOrStdin())
				close(done)
			}()
			select {
			case <-done:
			case <-ctx.Done():
			}
			return nil
		},
	}
}

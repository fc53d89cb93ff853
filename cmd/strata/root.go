package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// exitError carries a specific exit code (cluster health uses 1 for
// unhealthy, for scripts).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "strata",
		Short:         "Strata: a Kafka-compatible commit log in one binary",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand())
	root.AddCommand(topicCommand())
	root.AddCommand(groupCommand())
	root.AddCommand(txnCommand())
	root.AddCommand(featureCommand())
	root.AddCommand(clusterCommand())
	root.AddCommand(benchCommand())
	root.AddCommand(verifyCommand())
	root.AddCommand(userCommand())
	root.AddCommand(aclCommand())
	root.AddCommand(quotaCommand())
	return root
}

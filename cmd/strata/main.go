// Command strata is the Strata broker and its command-line client.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "strata:", err)
		os.Exit(exitCode(err))
	}
}

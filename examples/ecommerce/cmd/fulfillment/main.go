// Command fulfillment is the e-commerce example's fulfillment service: it reads
// payments-approved in its own consumer group and packs each order's box
// once.
//
//	fulfillment --brokers 127.0.0.1:9092 --out fulfillment.txt
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/internal/service"
)

func main() {
	f := service.RegisterFlags(flag.CommandLine, "the ledger of packed boxes")
	f.RegisterConsumerFlags(flag.CommandLine, "fulfillment")
	flag.Parse()
	service.Main("fulfillment", func(ctx context.Context, logger *slog.Logger) error {
		return service.RunFulfillment(ctx, f, logger)
	})
}

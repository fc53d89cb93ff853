// Command inventory is the e-commerce example's inventory service: it reads
// orders-created in its own consumer group and reserves each order's items
// once.
//
//	inventory --brokers 127.0.0.1:9092 --out inventory.txt
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/internal/service"
)

func main() {
	f := service.RegisterFlags(flag.CommandLine, "the ledger of stock reservations")
	f.RegisterConsumerFlags(flag.CommandLine, "inventory")
	flag.Parse()
	service.Main("inventory", func(ctx context.Context, logger *slog.Logger) error {
		return service.RunInventory(ctx, f, logger)
	})
}

package service

import (
	"context"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunInventory is the inventory service: it reserves the items of every
// OrderCreated, once per order. --out is the ledger of reservations; a real
// service would decrement stock and record the order id in one database
// transaction, which is what makes a redelivered order harmless.
func RunInventory(ctx context.Context, f *Flags, logger *slog.Logger) error {
	return onceEach(ctx, f, logger, "reserving stock for new orders", "orders.reserved", func(order events.OrderCreated) string {
		return "reserved " + describeItems(order.Items)
	})
}

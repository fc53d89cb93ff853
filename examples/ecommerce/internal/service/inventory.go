package service

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunInventory is the inventory service: it reserves the items of every
// OrderCreated, once per order. --out is the ledger of reservations; a real
// service would decrement stock and record the order id in one database
// transaction, which is what makes a redelivered order harmless.
func RunInventory(ctx context.Context, f *Flags, logger *slog.Logger) error {
	ledger, err := OpenLedger(f.Out)
	if err != nil {
		return err
	}
	defer ledger.Close()
	c, err := NewConsumer(f, events.TopicOrdersCreated, logger)
	if err != nil {
		return err
	}
	if err := EnsureTopics(ctx, c.Client, f.Partitions, events.TopicOrdersCreated); err != nil {
		c.Client.Close()
		return err
	}
	logger.Info("reserving stock for new orders", "orders.reserved", ledger.Len())
	return c.Run(ctx, func(ctx context.Context, records []*kgo.Record) error {
		for _, r := range records {
			order, err := events.DecodeOrderCreated(r.Value)
			if err != nil {
				logInvalid(logger, r, err)
				continue
			}
			err = once(ledger, logger, r, order.OrderID, func() string {
				return "reserved " + describeItems(order.Items)
			})
			if err != nil {
				return err
			}
		}
		return ledger.Sync()
	})
}

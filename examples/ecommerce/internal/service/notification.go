package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunNotification is the notification service: it e-mails the customer of
// every OrderCreated, once per order. Sending is writing a line to --out,
// which is also the ledger of e-mails sent. If the service is down, checkout
// does not notice; when it comes back it resumes from its group's committed
// offset and catches up on the e-mails it missed, skipping the few orders it
// had already e-mailed when it crashed.
func RunNotification(ctx context.Context, f *Flags, logger *slog.Logger) error {
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
	logger.Info("sending order confirmations", "emails.sent", ledger.Len())
	return c.Run(ctx, func(ctx context.Context, records []*kgo.Record) error {
		for _, r := range records {
			order, err := events.DecodeOrderCreated(r.Value)
			if err != nil {
				logInvalid(logger, r, err)
				continue
			}
			err = once(ledger, logger, r, order.OrderID, func() string {
				return fmt.Sprintf("email to %s: order %s confirmed: %s, %s", order.Customer, order.OrderID, describeItems(order.Items), events.Dollars(order.Total))
			})
			if err != nil {
				return err
			}
		}
		return ledger.Sync()
	})
}

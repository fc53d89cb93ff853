package service

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/strata-io/strata/examples/ecommerce/events"
)

// RunFulfillment is the fulfillment service: it packs a box for every
// PaymentApproved, once per order. It knows nothing of the payment service,
// only of its event. --out is the ledger of packed boxes; deduplicating by
// order id also absorbs the PaymentApproved events that payment produces
// again after its own crashes.
func RunFulfillment(ctx context.Context, f *Flags, logger *slog.Logger) error {
	ledger, c, err := startService(ctx, f, logger, []string{events.TopicPaymentsApproved})
	if err != nil {
		return err
	}
	defer ledger.Close()
	logger.Info("packing boxes for paid orders", "boxes.packed", ledger.Len())
	return c.Run(ctx, func(ctx context.Context, records []*kgo.Record) error {
		for _, r := range records {
			paid, err := events.DecodePaymentApproved(r.Value)
			if err != nil {
				logInvalid(logger, r, err)
				continue
			}
			err = once(ledger, logger, r, paid.OrderID, func() string {
				return fmt.Sprintf("packed box for %s: %s (payment %s)", paid.Customer, describeItems(paid.Items), paid.PaymentID)
			})
			if err != nil {
				return err
			}
		}
		return ledger.Sync()
	})
}

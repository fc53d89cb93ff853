// Command payment is the e-commerce example's payment service: it reads
// orders-created in its own consumer group, charges each order once and
// appends PaymentApproved to payments-approved.
//
//	payment --brokers 127.0.0.1:9092 --out payment.txt
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/internal/service"
)

func main() {
	f := service.RegisterFlags(flag.CommandLine, "the ledger of charges")
	f.RegisterConsumerFlags(flag.CommandLine, "payment")
	flag.Parse()
	service.Main("payment", func(ctx context.Context, logger *slog.Logger) error {
		return service.RunPayment(ctx, f, logger)
	})
}

// Command notification is the e-commerce example's notification service: it reads
// orders-created in its own consumer group and e-mails each customer once
// per order (an e-mail is a line in --out). Killed and restarted, it
// catches up from its committed offset.
//
//	notification --brokers 127.0.0.1:9092 --out notification.txt
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/internal/service"
)

func main() {
	f := service.RegisterFlags(flag.CommandLine, "where e-mails are \"sent\"; also the ledger of e-mails sent")
	f.RegisterConsumerFlags(flag.CommandLine, "notification")
	flag.Parse()
	service.Main("notification", func(ctx context.Context, logger *slog.Logger) error {
		return service.RunNotification(ctx, f, logger)
	})
}

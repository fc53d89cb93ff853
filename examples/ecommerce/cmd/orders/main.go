// Command orders is the e-commerce example's order service: POST /orders
// saves an order as PENDING, appends OrderCreated to orders-created and
// answers at once. With --generate N it places N random orders and exits.
//
//	orders --brokers 127.0.0.1:9092 --listen 127.0.0.1:8080
//	orders --generate 100 --rate 20
package main

import (
	"context"
	"flag"
	"log/slog"

	"github.com/strata-io/strata/examples/ecommerce/internal/service"
)

func main() {
	f := service.RegisterFlags(flag.CommandLine, "where accepted orders are written")
	var o service.OrdersOptions
	flag.StringVar(&o.Listen, "listen", "127.0.0.1:8080", "HTTP address for POST /orders and GET /orders/{id}")
	flag.IntVar(&o.Generate, "generate", 0, "place this many random orders, then exit, instead of serving HTTP")
	flag.Float64Var(&o.Rate, "rate", 50, "orders per second with --generate (0: as fast as the log acknowledges them)")
	flag.Parse()
	service.Main("orders", func(ctx context.Context, logger *slog.Logger) error {
		return service.RunOrders(ctx, f, o, logger)
	})
}

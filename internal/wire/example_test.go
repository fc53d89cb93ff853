package wire_test

import (
	"context"
	"log"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/wire"
)

// broker shows how a Handler answers with plain, deferred, silent and
// spliced responses.
type broker struct {
	segment *os.File               // a log segment
	acked   chan struct{}          // closed when replication catches up
	metrics func(wire.Observation) // a metrics sink
}

func (b *broker) Versions() map[int16]wire.VersionRange {
	return map[int16]wire.VersionRange{
		0:  {Min: 3, Max: 11}, // Produce
		1:  {Min: 4, Max: 16}, // Fetch
		18: {Min: 0, Max: 4},  // ApiVersions
	}
}

func (b *broker) Handle(ctx context.Context, c *wire.Conn, req *wire.Request) wire.Response {
	switch body := req.Body.(type) {
	case *kmsg.ApiVersionsRequest:
		resp := body.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = wire.ApiVersionsKeys(b.Versions())
		return wire.Response{Body: resp}

	case *kmsg.ProduceRequest:
		// Append body's records here: they alias the request frame, which
		// wire reuses once the response is written.
		resp := body.ResponseKind()
		switch body.Acks {
		case 0:
			return wire.Response{NoResponse: true}
		case -1:
			// Wait for replication off the read loop; later requests on
			// this connection are handled meanwhile, and responses still
			// go out in order.
			return wire.Response{Deferred: func() wire.Response {
				select {
				case <-b.acked:
				case <-ctx.Done(): // connection closed: return promptly
				}
				return wire.Response{Body: resp}
			}}
		}
		return wire.Response{Body: resp}

	case *kmsg.FetchRequest:
		// Records stay in the segment: each partition's records field holds
		// a cookie that wire replaces with the file region, sent with
		// sendfile(2).
		resp := body.ResponseKind().(*kmsg.FetchResponse)
		var splices []wire.Splice
		for _, t := range body.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition = p.Partition
				cookie := wire.NewCookie()
				rp.RecordBatches = cookie[:]
				splices = append(splices, wire.Splice{
					Cookie: cookie,
					Region: wire.FileRegion{File: b.segment, Pos: 0, Len: 4096},
				})
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return wire.Response{
			Body:    resp,
			Splices: splices,
			Done:    func() { /* release the segment reference */ },
		}
	}
	panic("unreachable: wire only passes the keys in Versions")
}

func Example() {
	b := &broker{acked: make(chan struct{}), metrics: func(wire.Observation) {}}
	srv, err := wire.NewServer(wire.Config{
		Handler:        b,
		MaxRequestSize: wire.DefaultMaxRequestSize, // socket.request.max.bytes
		Observe:        b.metrics,                  // per-request sizes and times
	})
	if err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(l)

	// On SIGTERM: finish what was read, then close.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Print(err)
	}
}

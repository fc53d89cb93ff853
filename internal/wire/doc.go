// Package wire is Strata's Kafka transport: it frames requests and
// responses, decodes request headers and bodies with kmsg, runs one
// connection loop per client and writes fetch responses with sendfile(2).
// It knows nothing of topics or storage; a Handler (the broker) answers each
// decoded request.
//
// # Frames
//
// Every request and response is one frame, all integers big-endian:
//
//	request frame                         response frame
//	  size            int32  bytes after    size            int32  bytes after
//	  api_key         int16                 correlation_id  int32
//	  api_version     int16                 tagged fields   uvarint count, then
//	  correlation_id  int32                                 tags (header v1 only)
//	  client_id       int16 length + bytes, body            kmsg at api_version
//	                  -1 for null (absent
//	                  in header v0)
//	  tagged fields   uvarint count, then
//	                  tags (header v2 only)
//	  body            kmsg at api_version
//
// Request header v0 is only used by ControlledShutdown v0; v2 is used when
// the request version is flexible (KIP-482), v1 otherwise. Responses use
// header v1 when flexible, v0 otherwise, except ApiVersions, whose responses
// always use v0 so that a client can read the error before it knows which
// versions the broker speaks.
//
// A frame larger than Config.MaxRequestSize (socket.request.max.bytes) or
// smaller than the smallest header is refused before anything is allocated
// for it, and the connection closed. Frames up to 1 MiB are read into pooled
// buffers; larger ones grow as their bytes arrive, so a client that
// announces 100 MiB and sends nothing costs no more than what it sent.
//
// # Limits
//
// Config.MaxQueuedRequestBytes (queued.max.request.bytes) is a budget of
// request bytes being read, decoded and handled across connections: a
// reader takes a frame's size before reading its body and returns it when
// Handle returns, and waits while the budget is spent, so the broker stops
// reading sockets. Config.MaxConnections makes the accept loops wait for a
// free slot; Config.MaxConnectionsPerIP closes a connection beyond it at
// once. A handler may lower a connection's frame limit
// (Conn.SetMaxRequestSize), as SASL listeners do before authentication,
// and ListenerConfig.MaxRequestSize sets it for new connections.
//
// # Versions and malformed input
//
// Handler.Versions lists what the handler implements; wire refuses the rest
// as Kafka does. An ApiVersions request at a version outside the range is
// answered with a v0 ApiVersions response carrying UNSUPPORTED_VERSION and
// the ApiVersions range (KIP-511), so the client retries at a version we
// speak. Any other unknown key or unsupported version, a header or body that
// does not decode, or a panic while decoding or handling closes the
// connection with one log line naming the request. Bytes left over after a
// body decodes are ignored: Kafka's request parser does not check for them
// either, and rejecting them would only break clients that pad.
//
// Decoding is bounded: kmsg checks every array count against the bytes left
// before allocating, and FuzzDecodeRequest checks that decoding a frame
// allocates at most a fixed multiple of its size (see maxDecodeAllocRatio).
//
// # The connection loop
//
// Each connection has two goroutines. The reader reads a frame, decodes it
// and calls Handler.Handle, one request at a time in arrival order (Kafka's
// per-connection ordering, which idempotent producers rely on), then queues
// the Response for the writer. The writer writes responses in request order.
// A Response may be Deferred: the writer calls the deferred function when
// that response's turn comes, so the reader goes on handling later requests
// (an acks=all produce waiting for replication does not stop a pipelined
// metadata request from being handled), while the bytes on the socket stay
// in order. At most Config.MaxInFlight responses queue per connection;
// beyond that the reader stops reading and TCP pushes back on the client.
// Requests that arrive while the handler is busy wait in the socket and the
// reader's buffer.
//
// The writer batches: responses that are ready back to back go out in one
// buffered write, flushed when the queue runs empty or before waiting on a
// deferred response.
//
// # Zero-copy responses
//
// The handler builds a fetch response with kmsg as usual but puts a unique
// 16-byte cookie (NewCookie) where each partition's records go, and returns
// one Splice per cookie naming a file region. Wire finds the cookies in the
// encoded body in order, rewrites the length before each (int32, or
// uvarint(len+1) in flexible versions), and writes the frame as header and
// body bytes with the file regions sent from the page cache by sendfile(2)
// at explicit offsets (never the file's shared position). TLS and non-TCP
// connections, files without a descriptor, and Config.CopySplices copy the
// regions through a pooled buffer instead.
//
// # Ownership
//
// A Request's body may alias the frame buffer (kmsg decodes byte fields,
// such as produce records, as sub-slices of the frame; strings are copied).
// The frame buffer belongs to the request until its response has been
// written or dropped and Response.Done has run; after that wire reuses it.
// A handler that keeps request bytes longer must copy them.
//
// # Locks
//
// Conn.mu guards the connection's value slot and the reader's stop flag
// against deadline changes; Server.mu guards the listener and connection
// sets. Server.mu may be held while taking Conn.mu (Shutdown), never the
// reverse.
package wire

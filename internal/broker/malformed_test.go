package broker

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMalformedInputClosesOnlyThatConnection sends frames a broker must
// refuse — oversize, undersized, garbage, unknown API — each on its own
// connection, and checks that each connection is closed without an answer
// and that the broker still serves a real client afterwards.
func TestMalformedInputClosesOnlyThatConnection(t *testing.T) {
	b := startBroker(t, map[string]string{"socket.request.max.bytes": "1048576"})
	frame := func(size uint32, body []byte) []byte {
		out := binary.BigEndian.AppendUint32(nil, size)
		return append(out, body...)
	}
	header := func(key, version int16) []byte {
		h := binary.BigEndian.AppendUint16(nil, uint16(key))
		h = binary.BigEndian.AppendUint16(h, uint16(version))
		h = binary.BigEndian.AppendUint32(h, 1)    // correlation id
		return binary.BigEndian.AppendUint16(h, 0) // empty client id
	}
	garbageProduce := append(header(0, 9), 0xff, 0xff, 0xff, 0xff, 0x01, 0x02)
	for name, data := range map[string][]byte{
		"oversize frame":      frame(1<<30, nil),
		"negative size":       frame(0xffffffff, nil),
		"size below a header": frame(3, []byte{0, 0, 0}),
		"garbage body":        frame(uint32(len(garbageProduce)), garbageProduce),
		"unknown API key":     frame(10, header(999, 0)),
		"unsupported version": frame(10, header(0, 99)),
	} {
		conn, err := net.DialTimeout("tcp", b.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := conn.Write(data); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var buf [1]byte
		if _, err := conn.Read(buf[:]); !errors.Is(err, io.EOF) {
			var ne net.Error
			if !errors.As(err, &ne) || ne.Timeout() {
				t.Errorf("%s: read %v, want the connection closed", name, err)
			}
		}
		conn.Close()
	}
	createTopic(t, newAdmin(t, b.Addr()), "still-alive", 1, nil)
	cl := newClient(t, b.Addr())
	if err := cl.ProduceSync(testContext(t), &kgo.Record{Topic: "still-alive", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("the broker stopped serving after malformed input: %v", err)
	}
}

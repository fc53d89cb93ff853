package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const apiVersionsKey = 18 // ApiVersions: response header is always v0

var (
	errMalformedHeader = errors.New("wire: malformed request header")
	errUnknownKey      = errors.New("wire: unknown or unsupported API key")
	errUnsupported     = errors.New("wire: unsupported API version")
	errMalformedBody   = errors.New("wire: malformed request body")
)

// versionTable is Handler.Versions indexed by key, for lookups without a
// map on every request.
type versionTable [kmsg.MaxKey + 1]struct {
	VersionRange
	ok bool
}

// newVersionTable checks versions and indexes them.
func newVersionTable(versions map[int16]VersionRange) (*versionTable, error) {
	t := new(versionTable)
	for key, r := range versions {
		req := kmsg.RequestForKey(key)
		if req == nil {
			return nil, fmt.Errorf("wire: handler lists API key %d, which kmsg does not know", key)
		}
		if r.Min < 0 || r.Min > r.Max || r.Max > req.MaxVersion() {
			return nil, fmt.Errorf("wire: handler lists %s versions %d-%d; kmsg knows 0-%d",
				kmsg.NameForKey(key), r.Min, r.Max, req.MaxVersion())
		}
		t[key].VersionRange, t[key].ok = r, true
	}
	if !t[apiVersionsKey].ok {
		return nil, errors.New("wire: handler does not list ApiVersions")
	}
	return t, nil
}

// supports reports whether the handler implements key at version.
func (t *versionTable) supports(key, version int16) bool {
	if key < 0 || int(key) >= len(t) {
		return false
	}
	e := &t[key]
	return e.ok && version >= e.Min && version <= e.Max
}

// requestHeader is a parsed request header. clientID aliases the frame.
type requestHeader struct {
	key, version  int16
	correlationID int32
	clientID      []byte
	flexible      bool
	msg           kmsg.Request // empty body at version; nil for keys kmsg does not know
}

// parseHeader parses the request header at the start of a frame and returns
// the body that follows. Whether the header has tagged fields (v2) depends
// on whether the request version is flexible, which kmsg knows for every
// key it knows; for an unknown key the header is parsed as v1 so the
// correlation id and client id can be logged.
func parseHeader(buf []byte) (requestHeader, []byte, error) {
	var h requestHeader
	if len(buf) < 8 {
		return h, nil, errMalformedHeader
	}
	h.key = int16(binary.BigEndian.Uint16(buf))
	h.version = int16(binary.BigEndian.Uint16(buf[2:]))
	h.correlationID = int32(binary.BigEndian.Uint32(buf[4:]))
	buf = buf[8:]
	if h.key == 7 && h.version == 0 { // ControlledShutdown v0: header v0
		h.msg = kmsg.RequestForKey(h.key)
		return h, buf, nil
	}
	if len(buf) < 2 {
		return h, nil, errMalformedHeader
	}
	n := int16(binary.BigEndian.Uint16(buf))
	buf = buf[2:]
	if n >= 0 {
		if len(buf) < int(n) {
			return h, nil, errMalformedHeader
		}
		h.clientID, buf = buf[:n:n], buf[n:]
	} else if n != -1 {
		return h, nil, errMalformedHeader
	}
	if h.msg = kmsg.RequestForKey(h.key); h.msg != nil {
		h.msg.SetVersion(h.version)
		h.flexible = h.msg.IsFlexible()
	}
	if h.flexible {
		var err error
		if buf, err = skipTags(buf); err != nil {
			return h, nil, err
		}
	}
	return h, buf, nil
}

// skipTags skips a tagged-field section: a uvarint count, then per field a
// uvarint tag, a uvarint size and that many bytes. No request header tag is
// defined, so wire keeps none.
func skipTags(buf []byte) ([]byte, error) {
	count, n := binary.Uvarint(buf)
	if n <= 0 {
		return nil, errMalformedHeader
	}
	buf = buf[n:]
	for ; count > 0; count-- {
		if _, n = binary.Uvarint(buf); n <= 0 {
			return nil, errMalformedHeader
		}
		buf = buf[n:]
		size, n := binary.Uvarint(buf)
		if n <= 0 || size > uint64(len(buf)-n) {
			return nil, errMalformedHeader
		}
		buf = buf[n+int(size):]
	}
	return buf, nil
}

// decodeRequest decodes a frame (without its size prefix) into req. It
// returns errUnknownKey or errUnsupported (wrapped) when versions rejects
// the request; req then has its header fields set but no Body. clientID is
// the previous request's client id on this connection, reused when equal
// to avoid an allocation per request.
func decodeRequest(buf []byte, versions *versionTable, clientID string, req *Request) error {
	h, body, err := parseHeader(buf)
	req.Key, req.Version, req.CorrelationID = h.key, h.version, h.correlationID
	if err != nil {
		return err
	}
	if string(h.clientID) == clientID {
		req.ClientID = clientID
	} else {
		req.ClientID = string(h.clientID)
	}
	req.Size = len(buf)
	if !versions.supports(h.key, h.version) {
		if h.key < 0 || int(h.key) >= len(versions) || !versions[h.key].ok {
			return fmt.Errorf("%w: %d", errUnknownKey, h.key)
		}
		r := versions[h.key].VersionRange
		return fmt.Errorf("%w: %s v%d, supported %d-%d", errUnsupported, kmsg.NameForKey(h.key), h.version, r.Min, r.Max)
	}
	if err := h.msg.ReadFrom(body); err != nil {
		return fmt.Errorf("%w: %s v%d: %v", errMalformedBody, kmsg.NameForKey(h.key), h.version, err)
	}
	req.Body = h.msg
	return nil
}

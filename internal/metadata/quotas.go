package metadata

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// QuotaEntity names what a client quota applies to, with Kafka's entity
// types user and client-id (together or alone), or ip (alone): a name,
// the default (Kafka's null name), or absent. It is comparable, for map
// keys.
type QuotaEntity struct {
	HasUser, UserDefault     bool
	User                     string
	HasClient, ClientDefault bool
	ClientID                 string
	// HasIP is set for an ip entity: IP is the address as
	// net.IP.String writes it.
	HasIP, IPDefault bool   `json:",omitempty"`
	IP               string `json:",omitempty"`
}

// String is Kafka's entity path: user=alice,client-id=<default>.
func (e QuotaEntity) String() string {
	var parts []string
	name := func(def bool, n string) string {
		if def {
			return "<default>"
		}
		return n
	}
	if e.HasUser {
		parts = append(parts, "user="+name(e.UserDefault, e.User))
	}
	if e.HasClient {
		parts = append(parts, "client-id="+name(e.ClientDefault, e.ClientID))
	}
	if e.HasIP {
		parts = append(parts, "ip="+name(e.IPDefault, e.IP))
	}
	return strings.Join(parts, ",")
}

// ClientQuotaRecord sets (or, with a nil Value, removes) one quota value
// of an entity (Kafka's ClientQuotaRecord): producer_byte_rate,
// consumer_byte_rate, request_percentage; connection_creation_rate for an
// ip entity.
type ClientQuotaRecord struct {
	Entity QuotaEntity `json:"entity"`
	Key    string      `json:"key"`
	Value  *float64    `json:"value"`
}

// applyQuota applies a ClientQuotaRecord.
func (img *Image) applyQuota(r *ClientQuotaRecord, offset int64) {
	if !img.quotasOwned {
		img.ClientQuotas = maps.Clone(img.ClientQuotas)
		if img.ClientQuotas == nil {
			img.ClientQuotas = map[QuotaEntity]map[string]float64{}
		}
		img.quotasOwned = true
	}
	values := maps.Clone(img.ClientQuotas[r.Entity])
	if values == nil {
		values = map[string]float64{}
	}
	if r.Value == nil {
		delete(values, r.Key)
	} else {
		values[r.Key] = *r.Value
	}
	if len(values) == 0 {
		delete(img.ClientQuotas, r.Entity)
	} else {
		img.ClientQuotas[r.Entity] = values
	}
	img.QuotasVersion = offset + 1
}

// quotaRecords are the client quotas as records, in a fixed order.
func (img *Image) quotaRecords() []Record {
	var out []Record
	entities := slices.SortedFunc(maps.Keys(img.ClientQuotas), func(a, b QuotaEntity) int { return cmp.Compare(a.String(), b.String()) })
	for _, e := range entities {
		for _, k := range slices.Sorted(maps.Keys(img.ClientQuotas[e])) {
			v := img.ClientQuotas[e][k]
			out = append(out, Record{ClientQuota: &ClientQuotaRecord{Entity: e, Key: k, Value: &v}})
		}
	}
	return out
}

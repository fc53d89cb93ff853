package controller

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/strata-io/strata/internal/metadata"
)

// ScramChange upserts (Credential set) or deletes (nil) one user's SCRAM
// credential for one mechanism: an entry of AlterUserScramCredentials.
type ScramChange struct {
	User       string
	Mechanism  int8
	Credential *metadata.ScramCredential
}

// AlterScramCredentials applies each change as its own metadata change and
// returns one error per change, as KIP-554 answers per user. Deleting a
// credential that does not exist is RESOURCE_NOT_FOUND.
func (c *Controller) AlterScramCredentials(ctx context.Context, changes []ScramChange) []error {
	errs := make([]error, len(changes))
	for i, ch := range changes {
		_, errs[i] = c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
			rec := &metadata.ScramCredentialRecord{User: ch.User, Mechanism: ch.Mechanism}
			if ch.Credential == nil {
				if _, ok := img.ScramCredentialOf(ch.User, ch.Mechanism); !ok {
					return nil, fmt.Errorf("%w: user %q has no credential for mechanism %d", kerr.ResourceNotFound, ch.User, ch.Mechanism)
				}
				rec.Removed = true
			} else {
				cr := ch.Credential
				rec.Salt, rec.StoredKey, rec.ServerKey, rec.Iterations = cr.Salt, cr.StoredKey, cr.ServerKey, cr.Iterations
			}
			return []metadata.Record{{ScramCredential: rec}}, nil
		})
	}
	return errs
}

// AlterAcls adds and removes ACL bindings in one metadata change. Adding
// a binding that exists, or removing one that does not, changes nothing.
func (c *Controller) AlterAcls(ctx context.Context, add, remove []metadata.Acl) error {
	_, err := c.propose(ctx, func(img *metadata.Image) ([]metadata.Record, error) {
		var records []metadata.Record
		for _, a := range add {
			if _, ok := img.Acls[a]; !ok {
				records = append(records, metadata.Record{Acl: &metadata.AclRecord{Acl: a}})
			}
		}
		for _, a := range remove {
			if _, ok := img.Acls[a]; ok {
				records = append(records, metadata.Record{Acl: &metadata.AclRecord{Acl: a, Removed: true}})
			}
		}
		return records, nil
	})
	return err
}

// QuotaChange sets (Value set) or removes (nil) one quota value of an
// entity: an op of AlterClientQuotas.
type QuotaChange struct {
	Key   string
	Value *float64
}

// AlterClientQuotas applies one entity's changes as one metadata change.
func (c *Controller) AlterClientQuotas(ctx context.Context, entity metadata.QuotaEntity, changes []QuotaChange, validateOnly bool) error {
	_, err := c.propose(ctx, func(*metadata.Image) ([]metadata.Record, error) {
		if validateOnly {
			return nil, nil
		}
		records := make([]metadata.Record, 0, len(changes))
		for _, ch := range changes {
			records = append(records, metadata.Record{ClientQuota: &metadata.ClientQuotaRecord{Entity: entity, Key: ch.Key, Value: ch.Value}})
		}
		return records, nil
	})
	return err
}

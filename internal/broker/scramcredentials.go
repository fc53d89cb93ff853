package broker

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/controller"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeUserScramCredentials: v0, answered by any broker from its
// metadata image (as Kafka's KRaft brokers do). AlterUserScramCredentials:
// v0, forwarded to the active controller, which writes the credentials to
// the metadata log; every node applies them. As KIP-554 has it, the client
// sends the salt and the salted password, never the password; the
// controller keeps the stored and server keys derived from it.
func init() {
	register(api{key: kmsg.DescribeUserSCRAMCredentials, min: 0, max: 0, handle: (*Broker).handleDescribeUserScramCredentials,
		authorize: clusterRule(auth.OpDescribe), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeUserSCRAMCredentialsResponse).ErrorCode = code
		}})
	register(api{key: kmsg.AlterUserSCRAMCredentials, min: 0, max: 0, handle: (*Broker).handleAlterUserScramCredentials, forwarded: true,
		authorize: clusterRule(auth.OpAlter), errors: alterUserScramCredentialsErrors, quota: requestTime})
}

func (b *Broker) handleDescribeUserScramCredentials(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
	img := b.image.Load()
	byUser := map[string][]kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{}
	for key, cred := range img.ScramCredentials {
		ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
		ci.Mechanism, ci.Iterations = key.Mechanism, cred.Iterations
		byUser[key.User] = append(byUser[key.User], ci)
	}
	result := func(user string) kmsg.DescribeUserSCRAMCredentialsResponseResult {
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = user
		infos, ok := byUser[user]
		if !ok {
			res.ErrorCode = kerr.ResourceNotFound.Code
			msg := "attempt to describe a user credential that does not exist"
			res.ErrorMessage = &msg
		}
		slices.SortFunc(infos, func(a, b kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo) int {
			return int(a.Mechanism) - int(b.Mechanism)
		})
		res.CredentialInfos = infos
		return res
	}
	if r.Users == nil {
		for _, user := range slices.Sorted(maps.Keys(byUser)) {
			resp.Results = append(resp.Results, result(user))
		}
		return respond(resp)
	}
	seen := map[string]int{}
	for _, u := range r.Users {
		seen[u.Name]++
	}
	for _, u := range r.Users {
		if seen[u.Name] == 0 {
			continue // reported once
		}
		res := result(u.Name)
		if seen[u.Name] > 1 {
			res = kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
			res.User, res.ErrorCode = u.Name, kerr.DuplicateResource.Code
			msg := "cannot describe the same user twice in one request"
			res.ErrorMessage = &msg
		}
		seen[u.Name] = 0
		resp.Results = append(resp.Results, res)
	}
	return respond(resp)
}

func (b *Broker) handleAlterUserScramCredentials(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.AlterUserSCRAMCredentialsRequest)
	resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
	// One result per user, in the order users first appear.
	var users []string
	errs := map[string]error{}
	count := map[string]int{}
	note := func(user string) {
		if _, ok := count[user]; !ok {
			users = append(users, user)
		}
		count[user]++
	}
	for _, d := range r.Deletions {
		note(d.Name)
	}
	for _, u := range r.Upsertions {
		note(u.Name)
	}
	var changes []controller.ScramChange
	var changeUsers []string
	check := func(user string, mech int8, iterations int32) error {
		switch {
		case user == "":
			return fmt.Errorf("%w: user name is empty", kerr.UnacceptableCredential)
		case !auth.ScramMechanism(mech).Valid():
			return fmt.Errorf("%w: unknown SCRAM mechanism %d", kerr.UnsupportedSaslMechanism, mech)
		case iterations != 0 && (iterations < auth.MinScramIterations || iterations > auth.MaxScramIterations):
			return fmt.Errorf("%w: iterations %d outside [%d, %d]", kerr.UnacceptableCredential, iterations, auth.MinScramIterations, auth.MaxScramIterations)
		}
		return nil
	}
	mechs := map[[2]string]bool{}
	dup := func(user string, mech int8) bool {
		k := [2]string{user, fmt.Sprint(mech)}
		if mechs[k] {
			return true
		}
		mechs[k] = true
		return false
	}
	for _, d := range r.Deletions {
		if err := check(d.Name, d.Mechanism, 0); err != nil {
			errs[d.Name] = err
		} else if dup(d.Name, d.Mechanism) {
			errs[d.Name] = fmt.Errorf("%w: a user's mechanism is altered twice", kerr.DuplicateResource)
		}
		changes = append(changes, controller.ScramChange{User: d.Name, Mechanism: d.Mechanism})
		changeUsers = append(changeUsers, d.Name)
	}
	for _, u := range r.Upsertions {
		err := check(u.Name, u.Mechanism, u.Iterations)
		switch {
		case err != nil:
			errs[u.Name] = err
		case u.Iterations == 0:
			errs[u.Name] = fmt.Errorf("%w: iterations must be set", kerr.UnacceptableCredential)
		case len(u.Salt) == 0 || len(u.SaltedPassword) == 0:
			errs[u.Name] = fmt.Errorf("%w: salt and salted password are required", kerr.UnacceptableCredential)
		case dup(u.Name, u.Mechanism):
			errs[u.Name] = fmt.Errorf("%w: a user's mechanism is altered twice", kerr.DuplicateResource)
		}
		cred := auth.ScramMechanism(u.Mechanism).CredentialFromSaltedPassword(u.Salt, u.SaltedPassword, u.Iterations)
		changes = append(changes, controller.ScramChange{User: u.Name, Mechanism: u.Mechanism, Credential: &metadata.ScramCredential{
			Salt: cred.Salt, StoredKey: cred.StoredKey, ServerKey: cred.ServerKey, Iterations: cred.Iterations}})
		changeUsers = append(changeUsers, u.Name)
	}
	// A user with any bad entry changes nothing.
	var valid []controller.ScramChange
	var validUsers []string
	for i, ch := range changes {
		if errs[changeUsers[i]] == nil {
			valid = append(valid, ch)
			validUsers = append(validUsers, changeUsers[i])
		}
	}
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		for i, err := range b.controller.AlterScramCredentials(ctx, valid) {
			if err != nil && errs[validUsers[i]] == nil {
				errs[validUsers[i]] = err
			}
		}
		for _, user := range users {
			res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			res.User = user
			if err := errs[user]; err != nil {
				res.ErrorCode, res.ErrorMessage = errorCode(err), errorMessage(err)
			}
			resp.Results = append(resp.Results, res)
		}
		return resp
	})
}

// alterUserScramCredentialsErrors answers each user req names (once) with
// code.
func alterUserScramCredentialsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	r, out := req.(*kmsg.AlterUserSCRAMCredentialsRequest), resp.(*kmsg.AlterUserSCRAMCredentialsResponse)
	seen := map[string]bool{}
	add := func(user string) {
		if !seen[user] {
			seen[user] = true
			res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
			res.User, res.ErrorCode = user, code
			out.Results = append(out.Results, res)
		}
	}
	for _, d := range r.Deletions {
		add(d.Name)
	}
	for _, u := range r.Upsertions {
		add(u.Name)
	}
}

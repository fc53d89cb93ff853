package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/strata-io/strata/internal/auth"
	"github.com/strata-io/strata/internal/metadata"
	"github.com/strata-io/strata/internal/wire"
)

// DescribeAcls: v0-3, answered from this broker's metadata image.
// CreateAcls and DeleteAcls: v0-3, forwarded to the active controller,
// which writes the bindings to the metadata log; every node applies them,
// so every broker enforces the same set. Version 0 has no pattern type:
// LITERAL, as in Kafka. Describing needs DESCRIBE on the cluster,
// creating and deleting ALTER (checked at the broker the client talks to;
// see authz.go).
func init() {
	register(api{key: kmsg.DescribeACLs, min: 0, max: 3, handle: (*Broker).handleDescribeAcls,
		authorize: clusterRule(auth.OpDescribe), quota: requestTime,
		errors: func(_ kmsg.Request, resp kmsg.Response, code int16) {
			resp.(*kmsg.DescribeACLsResponse).ErrorCode = code
		}})
	register(api{key: kmsg.CreateACLs, min: 0, max: 3, handle: (*Broker).handleCreateAcls, forwarded: true,
		authorize: clusterRule(auth.OpAlter), errors: createAclsErrors, quota: requestTime})
	register(api{key: kmsg.DeleteACLs, min: 0, max: 3, handle: (*Broker).handleDeleteAcls, forwarded: true,
		authorize: clusterRule(auth.OpAlter), errors: deleteAclsErrors, quota: requestTime})
}

func toAuthAcl(a metadata.Acl) auth.Acl {
	return auth.Acl{ResourceType: a.ResourceType, ResourceName: a.ResourceName, PatternType: a.PatternType,
		Principal: a.Principal, Host: a.Host, Operation: a.Operation, Permission: a.Permission}
}

// validateAcl checks a binding to be created, as Kafka's AclControlManager
// does.
func validateAcl(a metadata.Acl) error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", kerr.InvalidRequest, what) }
	switch {
	case a.ResourceType < auth.ResourceTopic || a.ResourceType > auth.ResourceUser:
		return bad(fmt.Sprintf("resource type %d", a.ResourceType))
	case a.PatternType != auth.PatternLiteral && a.PatternType != auth.PatternPrefixed:
		return bad(fmt.Sprintf("pattern type %d: want LITERAL or PREFIXED", a.PatternType))
	case a.Operation < auth.OpAll || a.Operation > auth.OpDescribeTokens:
		return bad(fmt.Sprintf("operation %d", a.Operation))
	case a.Permission != auth.PermissionAllow && a.Permission != auth.PermissionDeny:
		return bad(fmt.Sprintf("permission %d: want ALLOW or DENY", a.Permission))
	case a.ResourceName == "":
		return bad("empty resource name")
	case a.ResourceType == auth.ResourceCluster && a.ResourceName != auth.ClusterName:
		return bad("the cluster resource is named " + auth.ClusterName)
	case a.Host == "":
		return bad("empty host: use *")
	}
	if _, err := auth.ParsePrincipal(a.Principal); err != nil || !strings.HasPrefix(a.Principal, "User:") {
		return fmt.Errorf("%w: principal %q: want User:<name> or User:*", kerr.InvalidRequest, a.Principal)
	}
	return nil
}

func (b *Broker) handleCreateAcls(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.CreateACLsRequest)
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	var add []metadata.Acl
	errs := make([]error, len(r.Creations))
	for i, c := range r.Creations {
		a := metadata.Acl{ResourceType: int8(c.ResourceType), ResourceName: c.ResourceName, PatternType: int8(c.ResourcePatternType),
			Principal: c.Principal, Host: c.Host, Operation: int8(c.Operation), Permission: int8(c.PermissionType)}
		if r.Version == 0 {
			a.PatternType = auth.PatternLiteral
		}
		if errs[i] = validateAcl(a); errs[i] == nil {
			add = append(add, a)
		}
	}
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		var err error
		if len(add) > 0 {
			err = b.controller.AlterAcls(ctx, add, nil)
		}
		for i := range r.Creations {
			res := kmsg.NewCreateACLsResponseResult()
			e := errs[i]
			if e == nil {
				e = err
			}
			res.ErrorCode, res.ErrorMessage = errorCode(e), errorMessage(e)
			resp.Results = append(resp.Results, res)
		}
		return resp
	})
}

// aclFilter turns a DescribeAcls or DeleteAcls filter into auth's.
func aclFilter(version int16, rt kmsg.ACLResourceType, name *string, pt kmsg.ACLResourcePatternType, principal, host *string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) auth.Filter {
	f := auth.Filter{ResourceType: int8(rt), ResourceName: name, PatternType: int8(pt), Principal: principal, Host: host, Operation: int8(op), Permission: int8(perm)}
	if version == 0 {
		f.PatternType = auth.PatternLiteral
	}
	return f
}

func (b *Broker) handleDescribeAcls(_ context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DescribeACLsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	f := aclFilter(r.Version, r.ResourceType, r.ResourceName, r.ResourcePatternType, r.Principal, r.Host, r.Operation, r.PermissionType)
	type resourceKey struct {
		rt   int8
		name string
		pt   int8
	}
	index := map[resourceKey]int{}
	for _, ma := range b.image.Load().AclList() {
		a := toAuthAcl(ma)
		if !f.Matches(a) {
			continue
		}
		k := resourceKey{a.ResourceType, a.ResourceName, a.PatternType}
		i, ok := index[k]
		if !ok {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = kmsg.ACLResourceType(k.rt), k.name, kmsg.ACLResourcePatternType(k.pt)
			resp.Resources = append(resp.Resources, res)
			i = len(resp.Resources) - 1
			index[k] = i
		}
		acl := kmsg.NewDescribeACLsResponseResourceACL()
		acl.Principal, acl.Host, acl.Operation, acl.PermissionType = a.Principal, a.Host, kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
		resp.Resources[i].ACLs = append(resp.Resources[i].ACLs, acl)
	}
	return respond(resp)
}

func (b *Broker) handleDeleteAcls(ctx context.Context, _ *wire.Conn, req *wire.Request) wire.Response {
	r := req.Body.(*kmsg.DeleteACLsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	return b.deferController(ctx, 0, func(ctx context.Context) kmsg.Response {
		if _, active := b.controller.Leader(); !active {
			// A voter that does not lead would match the filters
			// against its own image, which may lag the leader's, and
			// answer that nothing matched: the broker tries the leader.
			deleteAclsErrors(r, resp, kerr.NotController.Code)
			return resp
		}
		// Matched against the latest image here, on the controller; a
		// binding created meanwhile is not deleted, as in Kafka.
		img := b.controller.Image()
		var remove []metadata.Acl
		for _, f := range r.Filters {
			filter := aclFilter(r.Version, f.ResourceType, f.ResourceName, f.ResourcePatternType, f.Principal, f.Host, f.Operation, f.PermissionType)
			res := kmsg.NewDeleteACLsResponseResult()
			for _, ma := range img.AclList() {
				a := toAuthAcl(ma)
				if !filter.Matches(a) {
					continue
				}
				remove = append(remove, ma)
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = kmsg.ACLResourceType(a.ResourceType), a.ResourceName, kmsg.ACLResourcePatternType(a.PatternType)
				m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, kmsg.ACLOperation(a.Operation), kmsg.ACLPermissionType(a.Permission)
				res.MatchingACLs = append(res.MatchingACLs, m)
			}
			resp.Results = append(resp.Results, res)
		}
		if len(remove) > 0 {
			if err := b.controller.AlterAcls(ctx, nil, remove); err != nil {
				for i := range resp.Results {
					resp.Results[i].ErrorCode, resp.Results[i].ErrorMessage = errorCode(err), errorMessage(err)
					resp.Results[i].MatchingACLs = nil
				}
			}
		}
		return resp
	})
}

// createAclsErrors answers each creation req names with code.
func createAclsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.CreateACLsResponse)
	for range req.(*kmsg.CreateACLsRequest).Creations {
		res := kmsg.NewCreateACLsResponseResult()
		res.ErrorCode = code
		out.Results = append(out.Results, res)
	}
}

// deleteAclsErrors answers each filter req names with code.
func deleteAclsErrors(req kmsg.Request, resp kmsg.Response, code int16) {
	out := resp.(*kmsg.DeleteACLsResponse)
	for range req.(*kmsg.DeleteACLsRequest).Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		res.ErrorCode = code
		out.Results = append(out.Results, res)
	}
}

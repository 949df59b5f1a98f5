// Package hooks lets a host process on the bus plug logic into a node,
// in any language, with plain NATS request-reply: the node asks, the host
// answers. Each hook is optional and configured per node ([hooks] in the
// config file); each has a deadline, Prometheus metrics (Metrics) and
// fails closed.
//
//	hook      subject                              request → reply                                  on failure
//	scopes    syncnode.hook.scopes.<partition>     ScopesRequest → ScopesReply (cached per actor)    the request fails closed (subscriptions revoked, writes sync.forbidden)
//	validate  syncnode.hook.validate.<partition>   ValidateRequest → ValidateReply (per commit)      the commit is rejected (sync.constraint_violation)
//	token     syncnode.hook.token                  TokenRequest → TokenReply (cached per token)       401 sync.auth_required
//
// Bodies are JSON. A hook refuses or fails with {"error": {"code": …,
// "message": …}}, or with micro's error headers (a hook written with
// nats.go's micro package may use Request.Error). Anything else that is
// not the reply's shape is an invalid reply, counted and treated as a
// failure. <partition> is the partition's subject token (package bus), so
// a hook process may serve some tenants only, and NATS permissions can be
// granted per tenant.
//
// With ValidateConfig.Reads, a validate request carries a readSubject the
// hook may send ReadRequests to until it answers: registered queries and
// rows by key over the commit's candidate state, answered from inside the
// commit's transaction (bus.RequestServing).
//
// Scopes implements engine.Resolver, Validator.Validate is an
// engine.CommitValidator and Tokens an httpapi.Authenticator: the hooks
// are the engine's own extension points, reached over the bus.
package hooks

package operations

import (
	"context"
	"errors"
)

// natsCommand is replaced by the NATS binding (step 5).
func (s *Service) natsCommand(ctx context.Context, c *command, call CommandCall) ([]Mutation, error) {
	return nil, errors.New("NATS commands are not wired")
}

package sessions

import "context"

// DropConnection closes cbth's connection to the running app-server, as
// a network hiccup would; the supervisor reconnects to the same process.
func (s *Shared) DropConnection(ctx context.Context) error {
	in, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	in.proc.Client().Close() // its error only says the peer saw no close frame
	return nil
}

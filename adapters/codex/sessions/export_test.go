package sessions

import "context"

// DropConnection closes the manager's connection to the running
// app-server, as a network hiccup would; the supervisor reconnects to the
// same process.
func (m *Manager) DropConnection(ctx context.Context) error {
	in, err := m.Ensure(ctx)
	if err != nil {
		return err
	}
	in.inst.Client().Close() // its error only says the peer saw no close frame
	return nil
}

// Instance is the nonce and pid of the running instance.
func (m *Manager) Instance(ctx context.Context) (string, int, error) {
	in, err := m.Ensure(ctx)
	if err != nil {
		return "", 0, err
	}
	return in.nonce, in.inst.Identity.PID, nil
}

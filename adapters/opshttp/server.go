package opshttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sink-io/sink/internal/listen"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Address is the host:port to listen on.
	Address string
	// Setting names the address's setting in messages (default "the HTTP
	// address").
	Setting string
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

func (c *ServerConfig) setDefaults() {
	if c.Setting == "" {
		c.Setting = "the HTTP address"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves the operations endpoint's handler on one address. Start
// opens the address (so that start-up fails clearly when it is taken) and
// serves in the background; Stop shuts down gracefully.
type Server struct {
	cfg ServerConfig
	ep  *listen.Endpoint
	srv *http.Server
}

// NewServer returns a server of h.
func NewServer(h http.Handler, cfg ServerConfig) *Server {
	cfg.setDefaults()
	return &Server{cfg: cfg, ep: listen.NewEndpoint(cfg.Address, cfg.Setting), srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
}

// Addr returns the address the server bound (nil before Start, and for a
// nil server).
func (s *Server) Addr() net.Addr {
	if s == nil {
		return nil
	}
	return s.ep.Addr()
}

// Start opens the address and serves in the background.
func (s *Server) Start(context.Context) error {
	lis, err := s.ep.Listen()
	if err != nil {
		return err
	}
	go func() {
		if err := s.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("the HTTP operations endpoint stopped", "error", err)
		}
	}()
	s.cfg.Logger.Info("serving the HTTP operations endpoint", "address", lis.Addr().String(),
		"paths", []string{PathLive, PathReady, PathMetrics})
	return nil
}

// Stop shuts the server down, waiting for requests in flight until ctx
// ends; then it closes what is left.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("cannot stop the HTTP operations endpoint: %w", err)
	}
	return nil
}

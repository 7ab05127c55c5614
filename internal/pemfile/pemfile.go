// Package pemfile reads PEM certificates and keys for the TLS settings of
// the adapters, naming the setting (not the key material) in every error.
package pemfile

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Read reads path, naming setting in the error.
func Read(setting, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read %q: %w", setting, path, PathError(err))
	}
	return b, nil
}

// CertPool parses the PEM CA certificates read from path.
func CertPool(setting, path string, pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %q contains no PEM certificate", setting, path)
	}
	return pool, nil
}

// KeyPair parses a PEM certificate and its key.
func KeyPair(certSetting, keySetting string, cert, key []byte) (tls.Certificate, error) {
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s and %s: cannot load the certificate and key: %w", certSetting, keySetting, err)
	}
	return pair, nil
}

// LoadCertPool reads and parses the PEM CA certificates of path.
func LoadCertPool(setting, path string) (*x509.CertPool, error) {
	b, err := Read(setting, path)
	if err != nil {
		return nil, err
	}
	return CertPool(setting, path, b)
}

// LoadKeyPair reads and parses a PEM certificate and its key, reporting
// both files' read errors at once.
func LoadKeyPair(certSetting, certFile, keySetting, keyFile string) (tls.Certificate, error) {
	cert, cerr := Read(certSetting, certFile)
	key, kerr := Read(keySetting, keyFile)
	if err := errors.Join(cerr, kerr); err != nil {
		return tls.Certificate{}, err
	}
	return KeyPair(certSetting, keySetting, cert, key)
}

// PathError drops the path of an *os.PathError (messages name the file
// already).
func PathError(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

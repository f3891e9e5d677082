package gateway

import (
	"net/http"
	"net/url"
	"strings"
)

// engineDoer sends the request path's exchanges with engines (forwarding and /tokenize). It
// calls the engine transport directly, as a reverse proxy does: http.Client.Do would copy every
// request's header for a redirect that engines do not send (a fifth of the gateway's
// allocations in a profile under load) and arm its redirect and timeout machinery. The answers
// http.Client would act on are still its: a redirect with a Location is sent again through the
// client, which then follows it as before, and a transport error is wrapped the way Do wraps it
// (*url.Error, "Post \"http://…\": …"); a URL with user info goes through the
// client, which turns it into basic auth.
type engineDoer struct {
	client *http.Client
	rt     http.RoundTripper
}

// Do sends req, which must be replayable (GetBody set, as http.NewRequest sets it for a
// bytes.Reader) for the redirect case.
func (d engineDoer) Do(req *http.Request) (*http.Response, error) {
	if req.URL.User != nil { // the client turns user info into basic auth
		return d.client.Do(req)
	}
	resp, err := d.rt.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: urlErrorOp(req.Method), URL: stripPassword(req.URL), Err: err}
	}
	if followsRedirect(resp) && (req.GetBody != nil || req.ContentLength == 0) {
		resp.Body.Close()
		again := req.Clone(req.Context())
		if req.GetBody != nil {
			if again.Body, err = req.GetBody(); err != nil {
				return nil, &url.Error{Op: urlErrorOp(req.Method), URL: stripPassword(req.URL), Err: err}
			}
		}
		return d.client.Do(again)
	}
	return resp, nil
}

// followsRedirect reports whether http.Client would follow resp (a redirect status with a
// Location; without one the client returns it as is).
func followsRedirect(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return resp.Header.Get("Location") != ""
	}
	return false
}

// urlErrorOp and stripPassword word an error as http.Client does.
func urlErrorOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

func stripPassword(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// The bundle's entry point: runs the suite with the page's configuration and leaves the
// results in window.__sluiceResults for the test driver.
import { run } from "./suite.mjs";

run({ ...window.SLUICE_CONFIG, base: location.origin }).then(
  (results) => (window.__sluiceResults = results),
  (err) => (window.__sluiceResults = [{ name: "suite", ok: false, error: String(err?.stack ?? err) }]),
);

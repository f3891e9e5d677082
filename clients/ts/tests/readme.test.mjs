// The README's TypeScript example, as a user would have it: it type-checks under tsc --strict
// against the package's own declarations and, run, routes a request.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { env } from "./env.mjs";

const run = promisify(execFile);
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");

async function readmeExample() {
  const text = await readFile(join(pkg, "..", "..", "README.md"), "utf8");
  const section = text.split("\n## Clients\n")[1]?.split("\n## ")[0] ?? "";
  const m = /```ts\n([\s\S]*?)```/.exec(section);
  assert.ok(m, "no ts example in README.md's Clients section");
  return m[1];
}

describe("README example", () => {
  let dir;
  after(() => dir && rm(dir, { recursive: true, force: true }));

  it("is at most ten lines, type-checks and routes a request", async () => {
    const code = await readmeExample();
    assert.ok(code.trim().split("\n").length <= 11, "the README promises a Decide in about ten lines");
    assert.ok(code.trim().split("\n").filter((l) => l.trim()).length <= 10, "at most ten lines of code");
    // A project that installed the package: node_modules/@sluice/client is the package folder.
    dir = await mkdtemp(join(tmpdir(), "sluice-ts-readme-"));
    await mkdir(join(dir, "node_modules", "@sluice"), { recursive: true });
    await symlink(pkg, join(dir, "node_modules", "@sluice", "client"), "dir");
    await writeFile(join(dir, "package.json"), JSON.stringify({ name: "user", private: true, type: "module" }));
    const local = code
      .replace("http://localhost:7080", env.http)
      .replace("router-token", env.decideToken)
      .replace("sim-chat", "chat")
      // The first call of a cold node process (module load, first connection) can take over a
      // second on a loaded CI machine; the test is about routing, not about that deadline.
      .replace("timeoutMs: 1000", "timeoutMs: 15000");
    await writeFile(join(dir, "example.mts"), local);
    await writeFile(join(dir, "example.mjs"), local);
    const compilerOptions = {
      noEmit: true, strict: true, module: "nodenext", moduleResolution: "nodenext", target: "es2022",
      lib: ["es2022", "dom"], types: [], skipLibCheck: true,
    };
    await writeFile(join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files: ["example.mts"] }));
    await run(join(pkg, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.json"], { cwd: dir }).catch((err) => assert.fail(`tsc: ${err.stdout}${err.stderr}`));
    const { stdout } = await run(process.execPath, ["example.mjs"], { cwd: dir });
    assert.match(stdout, /forward to http:\/\/127\.0\.0\.1:9/, "the example printed its refusal: see the reason above");
  });
});

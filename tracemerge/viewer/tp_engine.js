// Runs the Perfetto UI's trace_processor wasm engine under Node.js as a pipe.
//
//   node tp_engine.js <dir holding engine_bundle.js and trace_processor.wasm>
//
// stdin carries trace_processor RPC requests (TraceProcessorRpcStream bytes), stdout carries the
// replies, exactly as the native `trace_processor_shell` RPC speaks them. The engine bundle is
// written for a Web Worker; it runs here in a vm context that supplies the worker globals it
// uses and answers its synchronous XMLHttpRequest for the wasm file from the local disk.
'use strict';

const fs = require('fs');
const path = require('path');
const vm = require('vm');

const dir = path.resolve(process.argv[2] || '.');
const bundlePath = path.join(dir, 'engine_bundle.js');

class LocalXHR {
  open(_method, url) { this.url = url; }
  overrideMimeType() {}
  setRequestHeader() {}
  send() {
    const name = decodeURIComponent(new URL(this.url, 'file://' + dir + '/').pathname);
    const file = fs.existsSync(name) ? name : path.join(dir, path.basename(name));
    const data = fs.readFileSync(file);
    this.status = 200;
    this.readyState = 4;
    if (this.responseType === 'arraybuffer') {
      this.response = data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength);
    } else {
      this.response = this.responseText = data.toString('latin1');
    }
    if (this.onload) this.onload();
  }
}

// The bridge allocates its request buffer right after calling trace_processor_rpc_init; requests
// that arrive before then would be lost, so they wait until that export has returned.
let ready = false;
const pending = [];
function markReady() {
  ready = true;
  while (pending.length) deliver(pending.shift());
}
function wrapInstance(instance) {
  const init = instance.exports.trace_processor_rpc_init;
  if (!init) return instance;
  const exports = Object.assign({}, instance.exports);
  exports.trace_processor_rpc_init = (...args) => {
    const result = init(...args);
    setTimeout(markReady, 0);
    return result;
  };
  return { exports };
}
function PatchedInstance(module, imports) {
  return wrapInstance(new WebAssembly.Instance(module, imports));
}
const PatchedWebAssembly = Object.assign(Object.create(WebAssembly), {
  Instance: PatchedInstance,
  instantiate: async (source, imports) => {
    const result = await WebAssembly.instantiate(source, imports);
    if (result instanceof WebAssembly.Instance) return wrapInstance(result);
    return { module: result.module, instance: wrapInstance(result.instance) };
  },
  instantiateStreaming: undefined,
});

const sandbox = {
  WebAssembly: PatchedWebAssembly,
  ArrayBuffer, Uint8Array, Int8Array, Uint16Array, Int16Array, Uint32Array, Int32Array,
  Float32Array, Float64Array, BigInt64Array, BigUint64Array, DataView,
  // Errors thrown by the host's WebAssembly objects are tested with instanceof: same realm needed.
  Error, TypeError, RangeError, SyntaxError, ReferenceError,
  console: { log: (...a) => process.stderr.write(a.join(' ') + '\n'),
             warn: (...a) => process.stderr.write(a.join(' ') + '\n'),
             error: (...a) => process.stderr.write(a.join(' ') + '\n'),
             info: () => {}, debug: () => {} },
  XMLHttpRequest: LocalXHR,
  WorkerGlobalScope: function WorkerGlobalScope() {},
  importScripts: () => {},
  location: { href: 'file://' + bundlePath, origin: 'file://' },
  setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask,
  performance, TextDecoder, TextEncoder, URL,
};
sandbox.self = sandbox;
sandbox.globalThis = sandbox;
const context = vm.createContext(sandbox);
vm.runInContext(fs.readFileSync(bundlePath, 'utf8'), context, { filename: bundlePath });

const port = {
  onmessage: null,
  postMessage(bytes) { fs.writeSync(1, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)); },
};
sandbox.onmessage({ data: port });

function deliver(chunk) {
  port.onmessage({ data: new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength) });
}
process.stdin.on('data', (chunk) => { if (ready) deliver(chunk); else pending.push(chunk); });
process.stdin.on('end', () => process.exit(0));

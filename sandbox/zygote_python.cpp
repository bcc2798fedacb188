// Embedded CPython for the zygote and its children. Everything that touches a value the
// untrusted program produced does so through exact-type C API checks: no user-defined
// __repr__, __eq__, __iter__ or __del__ runs in trusted code.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "sandbox/zygote_python.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>

#include "sandbox/wire.h"
#include "sandbox/zygote_arena.h"

#ifndef AZR_PYTHON_STDLIB
#error "AZR_PYTHON_STDLIB must be defined by the build"
#endif

namespace azr::sandbox {
namespace {

// The trusted harness. Inputs are data, never code: an argument list is parsed as the
// argument part of a call `f(...)` and every argument must be a literal, so text such as
// "0) or (True" (which turns a spliced template into `f(0) or (True)`) is rejected instead
// of executed. It runs before the program, so the program cannot tamper with it.
constexpr const char* kHarness = R"PY(
import ast as _ast

def parse_call(src):
    tree = _ast.parse("f(" + src + "\n)", mode="eval")
    call = tree.body
    if type(call) is not _ast.Call or type(call.func) is not _ast.Name or call.func.id != "f":
        raise ValueError("input is not an argument list")
    return call

# literal_eval names the offending node with its address ("<ast.Call object at 0x7f...>"): the
# same bad input would read differently in every child, and in two runs of one command.
def literal_eval(node):
    try:
        return _ast.literal_eval(node)
    except ValueError as e:
        text = str(e)
        at = text.find(" object at 0x")
        end = text.find(">", at)
        if at < 0 or end < 0:
            raise
        raise ValueError(text[:at] + " object" + text[end:]) from None

def parse_args(src):
    call = parse_call(src)
    args = []
    for a in call.args:
        if type(a) is _ast.Starred:
            raise ValueError("starred arguments are not literals")
        args.append(literal_eval(a))
    kwargs = {}
    for k in call.keywords:
        if k.arg is None:
            raise ValueError("** arguments are not literals")
        kwargs[k.arg] = literal_eval(k.value)
    return tuple(args), kwargs

# Expression inputs: parse_call has checked that "f(" + src + ")" is exactly one call of f, so
# the same text after another callee is the same argument list; compiling it once is cheaper
# than compiling each argument's AST. The collector sits in eval's locals, which are searched
# before the program's globals, so the program cannot shadow it. Everything is bound at
# definition, before any program runs: replacing builtins.eval cannot redirect this.
def _collect(*args, **kwargs):
    return args, kwargs

def eval_args(src, g, _eval=eval, _compile=compile, _collect=_collect):
    code = _compile("__azr_args__(" + src + "\n)", "<input>", "eval")
    return _eval(code, g, {"__azr_args__": _collect})

def parse_literal(src):
    return literal_eval(_ast.parse(src.strip(), mode="eval").body)
)PY";

// Every code object a program runs must come from the compiler, which only emits bytecode it
// has checked. One built by hand (CodeType(...), code.replace(co_code=...), marshal.loads of
// crafted bytes) can index past its constants or stack: LOAD_CONST 200 of an empty tuple reads
// wild memory, and reads are enough to find the job's nonce (the proof that a result record
// came from this harness). Seccomp would still hold, so this guards the result channel and
// keeps crafted bytecode from being a way to crash. A hook added from C cannot be removed from
// Python (sys.addaudithook only adds), and the events are raised before the object exists.
// Only these events: a program that compiles and execs source text, swaps a function's
// __code__ for another compiled one, or introspects frames still runs as in plain CPython. The
// event carries the new object's metadata, not its bytecode, so a replace() of a compiled
// object's flags (types.coroutine on a generator function) is refused as well: a rare idiom in
// the small pure functions tasks are made of, and no way to tell it from a crafted one.
constexpr const char* kRefusedAuditEvents[] = {"code.__new__", "marshal.loads", "marshal.load"};

int refuse_handmade_code(const char* event, PyObject* /*args*/, void* /*user_data*/) {
  for (const char* refused : kRefusedAuditEvents) {
    if (std::strcmp(event, refused) == 0) {
      PyErr_Format(PyExc_PermissionError,
                   "%s is not permitted in the sandbox: code objects come only from compiling source", event);
      return -1;
    }
  }
  return 0;
}

PyObject* g_parse_args = nullptr;     // owned references, held for the zygote's lifetime
PyObject* g_parse_call = nullptr;
PyObject* g_eval_args = nullptr;
PyObject* g_parse_literal = nullptr;

std::string fetch_python_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string msg = type ? _PyType_Name(reinterpret_cast<PyTypeObject*>(type)) : "error";
  if (value) {
    if (PyObject* s = PyObject_Str(value)) {
      if (const char* c = PyUnicode_AsUTF8(s)) msg += std::string(": ") + c;
      Py_DECREF(s);
    }
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return msg;
}

void check_status(PyStatus st, const char* what) {
  if (PyStatus_Exception(st))
    throw std::runtime_error(std::string(what) + ": " + (st.err_msg ? st.err_msg : "failed"));
}

std::wstring widen(const std::string& s) { return std::wstring(s.begin(), s.end()); }

// ---------------------------------------------------------------------------------------------
// Child side: writing records.

void write_all(int fd, const std::string& data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0);  // the zygote is gone or closed the pipe; nobody is listening
    p += n;
    left -= static_cast<size_t>(n);
  }
}

constexpr size_t kMaxMessage = 2000;  // exception messages are truncated to this many bytes
constexpr int kMaxDepth = 900;        // deeper results are refused (CPython's repr fails near 1000)

std::string truncate_utf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  return s + "...";
}

// The current exception as (type name, message). str(exc) may run user code (a custom
// __str__); that is fine here, in the sandboxed child, under the CPU timer.
std::pair<std::string, std::string> take_exception() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string name = "Exception";
  if (type && PyType_Check(type)) name = _PyType_Name(reinterpret_cast<PyTypeObject*>(type));
  std::string message;
  if (value) {
    PyObject* s = PyObject_Str(value);
    if (s) {
      Py_ssize_t n = 0;
      const char* c = PyUnicode_AsUTF8AndSize(s, &n);
      if (c) message.assign(c, static_cast<size_t>(n));
      Py_DECREF(s);
    }
    PyErr_Clear();
  }
  // Deliberately leaked: releasing them could run a user-defined __del__.
  (void)type;
  (void)value;
  (void)tb;
  return {truncate_utf8(name, 200), truncate_utf8(message, kMaxMessage)};
}

// take_exception() where the heap may be spent: a MemoryError can leave no room for the copies of
// a long type name or message (the exception keeps what filled the heap alive), and the
// std::bad_alloc ended the child as `crashed`. Then it is a MemoryError without its text, which
// allocates nothing (a short string).
std::pair<std::string, std::string> take_exception_or_memory() {
  try {
    return take_exception();
  } catch (const std::bad_alloc&) {
    PyErr_Clear();
    return {"MemoryError", ""};
  }
}

// The strict serializer (value wire format, sandbox/value.h). Only exact built-in types are
// accepted; a subclass or any other object makes the result unrepresentable.
const std::string kOutOfMemoryWhy = "out of memory while encoding the result";  // made at start-up

class Encoder {
 public:
  explicit Encoder(size_t budget) : budget_(budget) {}
  enum class Outcome { Ok, Unrepresentable, TooLarge };

  Outcome encode(PyObject* obj) {
    out_.clear();
    outcome_ = Outcome::Ok;
    try {
      put(obj, 0);
    } catch (const std::bad_alloc&) {
      // Nothing here may allocate (a message built now threw again, out of the handler, and the
      // child died as `crashed`): the partial encoding goes, and the reason is a string made
      // before any program ran.
      std::string().swap(out_);
      outcome_ = Outcome::TooLarge;
      out_of_memory_ = true;
    }
    return outcome_;
  }
  const std::string& bytes() const { return out_; }
  const std::string& why() const { return out_of_memory_ ? kOutOfMemoryWhy : why_; }

 private:
  void fail(Outcome o, std::string why) {
    if (outcome_ == Outcome::Ok) {
      outcome_ = o;
      why_ = std::move(why);
    }
  }
  bool room(size_t n) {
    if (outcome_ != Outcome::Ok) return false;
    if (out_.size() + n > budget_) {
      fail(Outcome::TooLarge, "the result exceeds " + std::to_string(budget_) + " encoded bytes");
      return false;
    }
    return true;
  }
  void tag(char t) { out_.push_back(t); }
  void u32(uint32_t v) { out_.append(reinterpret_cast<const char*>(&v), 4); }
  void blob(char t, const char* p, size_t n) {
    if (!room(5 + n)) return;
    // Straight to the size a large blob needs (geometric growth otherwise): a string of many
    // megabytes is not copied through every doubling, each into freshly faulted pages.
    if (out_.capacity() < out_.size() + 5 + n) out_.reserve(std::max(out_.size() + 5 + n, 2 * out_.capacity()));
    tag(t);
    u32(static_cast<uint32_t>(n));
    out_.append(p, n);
  }
  void sequence(char t, PyObject* const* items, Py_ssize_t n, int depth) {
    if (!room(5)) return;
    tag(t);
    u32(static_cast<uint32_t>(n));
    for (Py_ssize_t i = 0; i < n && outcome_ == Outcome::Ok; ++i) put(items[i], depth + 1);
  }

  void put(PyObject* obj, int depth) {
    if (outcome_ != Outcome::Ok) return;
    if (depth > kMaxDepth) {
      fail(Outcome::Unrepresentable, "the result is nested deeper than " + std::to_string(kMaxDepth) + " levels");
      return;
    }
    PyTypeObject* t = Py_TYPE(obj);
    if (obj == Py_None) {
      if (room(1)) tag('N');
    } else if (obj == Py_True || obj == Py_False) {
      if (room(1)) tag(obj == Py_True ? 'T' : 'F');
    } else if (obj == Py_Ellipsis) {
      if (room(1)) tag('.');
    } else if (t == &PyLong_Type) {
      put_int(obj);
    } else if (t == &PyFloat_Type) {
      if (!room(9)) return;
      double d = PyFloat_AS_DOUBLE(obj);
      tag('f');
      out_.append(reinterpret_cast<const char*>(&d), 8);
    } else if (t == &PyComplex_Type) {
      if (!room(17)) return;
      Py_complex c = reinterpret_cast<PyComplexObject*>(obj)->cval;
      tag('c');
      out_.append(reinterpret_cast<const char*>(&c.real), 8);
      out_.append(reinterpret_cast<const char*>(&c.imag), 8);
    } else if (t == &PyUnicode_Type) {
      put_str(obj);
    } else if (t == &PyBytes_Type) {
      blob('b', PyBytes_AS_STRING(obj), static_cast<size_t>(PyBytes_GET_SIZE(obj)));
    } else if (t == &PyByteArray_Type) {
      blob('a', PyByteArray_AS_STRING(obj), static_cast<size_t>(PyByteArray_GET_SIZE(obj)));
    } else if (t == &PyTuple_Type) {
      sequence('t', &PyTuple_GET_ITEM(obj, 0), PyTuple_GET_SIZE(obj), depth);
    } else if (t == &PyList_Type) {
      // No user code runs while we walk, so the list cannot change under us.
      sequence('l', reinterpret_cast<PyListObject*>(obj)->ob_item, PyList_GET_SIZE(obj), depth);
    } else if (t == &PyDict_Type) {
      if (!room(5)) return;
      tag('d');
      u32(static_cast<uint32_t>(PyDict_GET_SIZE(obj)));
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (outcome_ == Outcome::Ok && PyDict_Next(obj, &pos, &k, &v)) {
        put(k, depth + 1);
        put(v, depth + 1);
      }
    } else if (t == &PySet_Type || t == &PyFrozenSet_Type) {
      if (!room(5)) return;
      tag(t == &PySet_Type ? 'S' : 'z');
      u32(static_cast<uint32_t>(PySet_GET_SIZE(obj)));
      Py_ssize_t pos = 0;
      PyObject* k;
      Py_hash_t h;
      while (outcome_ == Outcome::Ok && _PySet_NextEntry(obj, &pos, &k, &h)) put(k, depth + 1);
    } else {
      fail(Outcome::Unrepresentable, std::string("the result contains a value of type '") +
                                         truncate_utf8(t->tp_name ? t->tp_name : "?", 100) +
                                         "', which is not a literal");
    }
  }

  void put_int(PyObject* obj) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (!overflow) {
      if (!room(9)) return;
      tag('i');
      out_.append(reinterpret_cast<const char*>(&v), 8);
      return;
    }
    PyErr_Clear();
    int negative = _PyLong_Sign(obj) < 0;
    PyObject* mag = PyNumber_Absolute(obj);  // exact int: no user code
    if (!mag) {
      PyErr_Clear();
      fail(Outcome::TooLarge, "out of memory while encoding an int");
      return;
    }
    size_t nbits = _PyLong_NumBits(mag);
    size_t nbytes = (nbits + 7) / 8;
    if (room(6 + nbytes)) {
      tag('I');
      out_.push_back(static_cast<char>(negative));
      u32(static_cast<uint32_t>(nbytes));
      size_t at = out_.size();
      out_.resize(at + nbytes);
      _PyLong_AsByteArray(reinterpret_cast<PyLongObject*>(mag),
                          reinterpret_cast<unsigned char*>(&out_[at]), nbytes, /*little_endian=*/1,
                          /*is_signed=*/0);
    }
    Py_DECREF(mag);
  }

  // Code points as UTF-8, surrogates included (they are legal in a Python str).
  void put_str(PyObject* obj) {
    if (PyUnicode_READY(obj) < 0) {
      PyErr_Clear();
      fail(Outcome::TooLarge, "out of memory while encoding a str");
      return;
    }
    Py_ssize_t n = PyUnicode_GET_LENGTH(obj);
    if (PyUnicode_IS_ASCII(obj)) {
      blob('s', reinterpret_cast<const char*>(PyUnicode_DATA(obj)), static_cast<size_t>(n));
      return;
    }
    if (!room(5 + static_cast<size_t>(n))) return;
    int kind = PyUnicode_KIND(obj);
    const void* data = PyUnicode_DATA(obj);
    std::string utf8;
    utf8.reserve(static_cast<size_t>(n) * 2);
    for (Py_ssize_t i = 0; i < n; ++i) {
      Py_UCS4 c = PyUnicode_READ(kind, data, i);
      if (c < 0x80) {
        utf8.push_back(static_cast<char>(c));
      } else if (c < 0x800) {
        utf8.push_back(static_cast<char>(0xC0 | (c >> 6)));
        utf8.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      } else if (c < 0x10000) {
        utf8.push_back(static_cast<char>(0xE0 | (c >> 12)));
        utf8.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        utf8.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      } else {
        utf8.push_back(static_cast<char>(0xF0 | (c >> 18)));
        utf8.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        utf8.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        utf8.push_back(static_cast<char>(0x80 | (c & 0x3F)));
      }
      if (utf8.size() > budget_) break;
    }
    blob('s', utf8.data(), utf8.size());
  }

  size_t budget_;
  std::string out_;
  Outcome outcome_ = Outcome::Ok;
  std::string why_;
  bool out_of_memory_ = false;  // why() is kOutOfMemoryWhy
};

const uint64_t* g_nonce = nullptr;  // the running job's nonce (child only)

void record_header(wire::Writer& w, uint8_t kind) {
  w.u8(kind);
  w.u64(g_nonce[0]);
  w.u64(g_nonce[1]);
}

timespec cpu_clock() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t;
}

// A call's CPU time in microseconds since `from` (cpu_clock()), for its record (EvalPlus limits
// each input's time).
uint32_t call_micros(const timespec& from) {
  const timespec now = cpu_clock();
  const double us = double(now.tv_sec - from.tv_sec) * 1e6 + double(now.tv_nsec - from.tv_nsec) * 1e-3;
  return us <= 0 ? 0u : us >= 4e9 ? 4000000000u : static_cast<uint32_t>(us);
}

void record_error(std::string& rec, uint32_t index, protocol::RecordStatus st, const std::string& type,
                  const std::string& message, uint32_t micros = 0) {
  wire::Writer w(rec);
  record_header(w, protocol::kRecordResult);
  w.u32(index);
  w.u32(micros);
  w.u8(static_cast<uint8_t>(st));
  w.str(type);
  w.str(message);
}

// Encodes `obj` (a borrowed reference) as the record for input `index`.
// Writes the record of call `index`: for a value, the header from `rec` and then the encoded
// bytes as they are (a value of many megabytes is not copied into the record first).
void write_value_record(int fd, std::string& rec, uint32_t index, PyObject* obj, size_t budget, uint32_t micros = 0) {
  Encoder enc(budget);
  switch (enc.encode(obj)) {
    case Encoder::Outcome::Ok: {
      wire::Writer w(rec);
      record_header(w, protocol::kRecordResult);
      w.u32(index);
      w.u32(micros);
      w.u8(static_cast<uint8_t>(protocol::RecordStatus::Ok));
      w.u32(static_cast<uint32_t>(enc.bytes().size()));  // then the bytes: wire::Writer::str's layout
      write_all(fd, rec);
      write_all(fd, enc.bytes());
      return;
    }
    case Encoder::Outcome::Unrepresentable:
      record_error(rec, index, protocol::RecordStatus::Unrepresentable, "", enc.why(), micros);
      break;
    case Encoder::Outcome::TooLarge:
      record_error(rec, index, protocol::RecordStatus::ResultTooLarge, "", enc.why(), micros);
      break;
  }
  write_all(fd, rec);
}

PyObject* unicode_from(const std::string& s) {
  return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
}

}  // namespace

PythonInfo init_python(const PythonInit& init) {
  // UTF-8 mode: with an empty environment the locale is "C", and without it print('é') would
  // raise UnicodeEncodeError on an ASCII stdout.
  install_huge_page_arenas();
  PyPreConfig pre;
  PyPreConfig_InitIsolatedConfig(&pre);
  pre.utf8_mode = 1;
  check_status(Py_PreInitialize(&pre), "Py_PreInitialize");

  PyConfig config;
  PyConfig_InitIsolatedConfig(&config);
  struct ConfigGuard {
    PyConfig* c;
    ~ConfigGuard() { PyConfig_Clear(c); }
  } guard{&config};
  // PYTHONHASHSEED is ignored by the isolated config; the seed must be set here.
  config.use_hash_seed = 1;
  config.hash_seed = static_cast<unsigned long>(init.hash_seed);
  config.site_import = 0;
  config.user_site_directory = 0;
  config.install_signal_handlers = 0;
  config.write_bytecode = 0;
  config.buffered_stdio = 0;  // prints reach the capture pipe even if the child is killed
  config.parse_argv = 0;
  config.module_search_paths_set = 1;
  check_status(PyWideStringList_Append(&config.module_search_paths, widen(AZR_PYTHON_STDLIB).c_str()),
               "module_search_paths");
  check_status(PyWideStringList_Append(&config.module_search_paths, widen(AZR_PYTHON_DYNLOAD).c_str()),
               "module_search_paths");
  check_status(PyConfig_SetString(&config, &config.home, widen(AZR_PYTHON_HOME).c_str()), "home");
  check_status(PyConfig_SetString(&config, &config.program_name, L"azr-sandbox"), "program_name");
  check_status(Py_InitializeFromConfig(&config), "Py_InitializeFromConfig");

  PythonInfo info;
  info.version = Py_GetVersion();
  for (const auto& name : init.preimports) {
    PyObject* m = PyImport_ImportModule(name.c_str());
    if (!m) {
      PyErr_Clear();
      info.missing_preimports.push_back(name);
      continue;
    }
    Py_DECREF(m);
  }

  PyObject* ns = PyDict_New();
  PyDict_SetItemString(ns, "__builtins__", PyEval_GetBuiltins());
  PyObject* r = PyRun_String(kHarness, Py_file_input, ns, ns);
  if (!r) throw std::runtime_error("harness: " + fetch_python_error());
  Py_DECREF(r);
  g_parse_args = PyDict_GetItemString(ns, "parse_args");
  g_parse_call = PyDict_GetItemString(ns, "parse_call");
  g_eval_args = PyDict_GetItemString(ns, "eval_args");
  g_parse_literal = PyDict_GetItemString(ns, "parse_literal");
  for (PyObject* fn : {g_parse_args, g_parse_call, g_eval_args, g_parse_literal}) {
    if (!fn) throw std::runtime_error("harness: functions missing");
    Py_INCREF(fn);
  }

  // After the pre-imports and the harness: importing a module from its .pyc is a marshal.loads.
  if (PySys_AddAuditHook(refuse_handmade_code, nullptr) != 0)
    throw std::runtime_error("audit hook: " + fetch_python_error());

  // Children are short-lived: a GC pass there would only touch (and copy) frozen pages.
  r = PyRun_String("import gc as _gc\n_gc.collect()\n_gc.freeze()\n", Py_file_input, ns, ns);
  if (!r) throw std::runtime_error("gc.freeze: " + fetch_python_error());
  Py_DECREF(r);
  seal_huge_page_arenas();
  return info;
}

void python_before_fork() { PyOS_BeforeFork(); }
void python_after_fork_parent() { PyOS_AfterFork_Parent(); }
void python_after_fork_child() {
  PyOS_AfterFork_Child();
  PyGC_Disable();
}

void run_job_in_child(const protocol::Request& req, int result_fd) {
  const size_t budget = static_cast<size_t>(req.limits.max_result_bytes);
  const uint32_t n = static_cast<uint32_t>(req.inputs.size());
  // Room for any error record (a type of at most 200 bytes, a message of at most kMaxMessage, each
  // with "..." when cut) and the done record, taken before any input or program code runs: a
  // MemoryError can come with the heap spent (a list of small ints grown to the limit, which the
  // exception keeps alive), and a record that then had to grow threw std::bad_alloc, ending the
  // child as `crashed`.
  std::string rec;
  rec.reserve(kMaxMessage + 1024);

  g_nonce = req.nonce;
  auto done = [&]() {
    wire::Writer w(rec);
    record_header(w, protocol::kRecordDone);
    w.u32(n);
    write_all(result_fd, rec);
    _exit(0);  // never run interpreter teardown, atexit hooks or __del__ of user objects
  };

  if (req.op == protocol::Op::ParseLiterals) {
    for (uint32_t i = 0; i < n; ++i) {
      rec.clear();
      PyObject* src = unicode_from(req.inputs[i]);
      PyObject* v = src ? PyObject_CallOneArg(g_parse_literal, src) : nullptr;
      if (v) {
        write_value_record(result_fd, rec, i, v, budget);
      } else {
        auto [type, msg] = take_exception_or_memory();
        record_error(rec, i, protocol::RecordStatus::InputError, type, msg);
        write_all(result_fd, rec);
      }
    }
    rec.clear();
    done();
  }

  // 1. Parse every input before any program code runs. Literal inputs become values here;
  //    expression inputs become checked call nodes, evaluated after the program ran.
  const bool literal = req.input_mode == protocol::InputMode::Literal;
  std::vector<PyObject*> args(n, nullptr), kwargs(n, nullptr), calls(n, nullptr);  // calls: checked input text
  std::vector<std::pair<std::string, std::string>> input_errors(n);
  for (uint32_t i = 0; i < n; ++i) {
    PyObject* src = unicode_from(req.inputs[i]);
    PyObject* parsed = src ? PyObject_CallOneArg(literal ? g_parse_args : g_parse_call, src) : nullptr;
    if (parsed && literal && PyTuple_Check(parsed) && PyTuple_GET_SIZE(parsed) == 2) {
      args[i] = PyTuple_GET_ITEM(parsed, 0);
      kwargs[i] = PyTuple_GET_ITEM(parsed, 1);
    } else if (parsed && !literal) {
      calls[i] = src;  // structure checked; evaluated from its text after the program ran
    } else {
      input_errors[i] = take_exception_or_memory();
      if (input_errors[i].first.empty()) input_errors[i].first = "Exception";
    }
  }

  // 2. Execute the program in a fresh module namespace.
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* name = PyUnicode_FromString(req.module_name.c_str());
  PyDict_SetItemString(globals, "__name__", name);
  std::pair<std::string, std::string> program_error;
  bool program_ok = false;
  PyObject* code = nullptr;
  if (req.program.find('\0') != std::string::npos)  // as compile() in 3.11 reports it
    PyErr_SetString(PyExc_ValueError, "source code string cannot contain null bytes");
  else
    code = Py_CompileStringExFlags(req.program.c_str(), "<program>", Py_file_input, nullptr, -1);
  if (code) {
    PyObject* r = PyEval_EvalCode(code, globals, globals);
    if (r) program_ok = true;
  }
  if (!program_ok) program_error = take_exception_or_memory();

  PyObject* entry = nullptr;
  if (program_ok) {
    entry = PyDict_GetItemString(globals, req.entry.c_str());
    if (!entry || !PyCallable_Check(entry)) {
      program_ok = false;
      program_error = {"NameError", "the program defines no function '" + req.entry + "'"};
    }
  }

  // 3. One call per input; each record is written as soon as it is known, so a later
  //    timeout does not lose the earlier results.
  for (uint32_t i = 0; i < n; ++i) {
    rec.clear();
    if (!args[i] && !calls[i]) {
      record_error(rec, i, protocol::RecordStatus::InputError, input_errors[i].first, input_errors[i].second);
    } else if (!program_ok) {
      record_error(rec, i, protocol::RecordStatus::Exception, program_error.first, program_error.second);
    } else {
      const timespec started = cpu_clock();
      if (calls[i]) {  // expression input: evaluate it now, in the program's namespace
        PyObject* ev = PyObject_CallFunctionObjArgs(g_eval_args, calls[i], globals, nullptr);
        if (ev && PyTuple_Check(ev) && PyTuple_GET_SIZE(ev) == 2) {
          args[i] = PyTuple_GET_ITEM(ev, 0);
          kwargs[i] = PyTuple_GET_ITEM(ev, 1);
        }
      }
      PyObject* v = nullptr;
      if (args[i] && PyTuple_Check(args[i]) && PyDict_Check(kwargs[i])) {
        PyObject* kw = PyDict_GET_SIZE(kwargs[i]) ? kwargs[i] : nullptr;
        v = PyObject_Call(entry, args[i], kw);
      } else if (!PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "input did not evaluate to arguments");
      }
      // Results are never released: a user __del__ must not run after the record is made.
      const uint32_t micros = call_micros(started);
      if (v) {
        write_value_record(result_fd, rec, i, v, budget, micros);
        continue;
      }
      auto [type, msg] = take_exception_or_memory();
      record_error(rec, i, protocol::RecordStatus::Exception, type, msg, micros);
    }
    write_all(result_fd, rec);
  }
  rec.clear();
  done();
  __builtin_unreachable();
}

}  // namespace azr::sandbox

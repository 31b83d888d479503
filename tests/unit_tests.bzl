"""`unit_tests`: the light test modules of a package in one process (tests/run_modules.py)."""

def unit_tests(modules, deps, size = "large"):
    """A `unit_tests` py_test running `modules` (names of `*_test.py` files of this package).

    Each module keeps its own py_test, tagged "manual", for running it alone.

    Args:
      modules: the test modules, without ".py".
      deps: what the modules need (the union of their own targets' deps); the runner's own,
        `//fedasr_tff/runtime`, is added.
      size: the target's size.
    """
    package = native.package_name().replace("/", ".")
    native.py_test(
        name = "unit_tests",
        size = size,
        srcs = ["//tests:run_modules.py"] + [module + ".py" for module in modules],
        args = ["--test_modules=" + ",".join([package + "." + module for module in modules])],
        main = "//tests:run_modules.py",
        python_version = "PY3",
        deps = deps + ([] if "//fedasr_tff/runtime" in deps else ["//fedasr_tff/runtime"]),
    )

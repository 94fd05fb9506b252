// The one translation unit that compiles Boost.Test's runner.
#define BOOST_TEST_MODULE diloco
#include <boost/test/unit_test.hpp>

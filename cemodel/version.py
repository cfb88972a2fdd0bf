"""cemodel's version (a leaf module: the compiler's stages read it without importing the
package and its API)."""

__version__ = "0.1.0"

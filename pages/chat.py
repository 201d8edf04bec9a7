import streamlit as st
st.title("Coming soon")
